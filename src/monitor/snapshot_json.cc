#include "monitor/snapshot_json.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

template <typename T>
nlohmann::json OrNull(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json SnapshotToJson(const MonitorSnapshot& snapshot) {
  const HostSample& h = snapshot.host;
  nlohmann::json host = {
      {"cpu_count", h.cpu_count},
      {"cpu_utilization_ratio", OrNull(h.cpu_utilization_ratio)},
      {"memory_used_bytes", OrNull(h.memory_used_bytes)},
      {"memory_total_bytes", OrNull(h.memory_total_bytes)},
      {"disk_read_bytes_per_second", OrNull(h.disk_read_bytes_per_second)},
      {"disk_read_bytes_total", OrNull(h.disk_read_bytes_total)},
      {"tree_processes", h.tree_processes},
      {"tree_cpu_cores", OrNull(h.tree_cpu_cores)},
      {"tree_cpu_seconds_total", OrNull(h.tree_cpu_seconds_total)},
      {"tree_rss_bytes", OrNull(h.tree_rss_bytes)},
      {"tree_pss_bytes", OrNull(h.tree_pss_bytes)},
      {"tree_read_bytes_per_second", OrNull(h.tree_read_bytes_per_second)},
      {"tree_read_bytes_total", OrNull(h.tree_read_bytes_total)},
      {"cgroup_cpu_limit_cores", OrNull(h.cgroup_cpu_limit_cores)},
      {"cgroup_cpu_throttled_seconds_total", OrNull(h.cgroup_cpu_throttled_seconds_total)},
      {"cgroup_cpu_throttled_periods_total", OrNull(h.cgroup_cpu_throttled_periods_total)},
      {"cgroup_memory_limit_bytes", OrNull(h.cgroup_memory_limit_bytes)},
      {"cgroup_memory_used_bytes", OrNull(h.cgroup_memory_used_bytes)},
  };
  nlohmann::json processes = nlohmann::json::array();
  for (const ProcessSample& p : h.processes) {
    processes.push_back({{"pid", p.pid},
                         {"ppid", p.ppid},
                         {"name", p.name},
                         {"cpu_cores", OrNull(p.cpu_cores)},
                         {"rss_bytes", p.rss_bytes}});
  }
  host["processes"] = std::move(processes);
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuSample& g : snapshot.gpus) {
    nlohmann::json gpu_processes = nlohmann::json::array();
    for (const GpuProcessSample& p : g.processes) {
      gpu_processes.push_back({{"pid", p.pid},
                               {"memory_bytes", OrNull(p.memory_bytes)},
                               {"sm_utilization_ratio", OrNull(p.sm_utilization_ratio)}});
    }
    gpus.push_back({
        {"index", g.index},
        {"name", g.name},
        {"utilization_ratio", OrNull(g.utilization_ratio)},
        {"memory_utilization_ratio", OrNull(g.memory_utilization_ratio)},
        {"memory_used_bytes", OrNull(g.memory_used_bytes)},
        {"memory_total_bytes", OrNull(g.memory_total_bytes)},
        {"power_watts", OrNull(g.power_watts)},
        {"temperature_celsius", OrNull(g.temperature_celsius)},
        {"sm_clock_hertz", OrNull(g.sm_clock_hertz)},
        {"pcie_rx_bytes_per_second", OrNull(g.pcie_rx_bytes_per_second)},
        {"pcie_tx_bytes_per_second", OrNull(g.pcie_tx_bytes_per_second)},
        {"tree_memory_bytes", OrNull(g.tree_memory_bytes)},
        {"tree_sm_utilization_ratio", OrNull(g.tree_sm_utilization_ratio)},
        {"processes", std::move(gpu_processes)},
    });
  }
  return {{"unix_time_seconds", snapshot.unix_millis / 1000.0},
          {"elapsed_seconds", snapshot.elapsed_seconds},
          {"host", std::move(host)},
          {"gpus", std::move(gpus)}};
}

JsonLinesWriter::JsonLinesWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "we");
  if (file_ == nullptr) {
    throw Error(ErrorCode::kIo, fmt::format("cannot open the JSON lines file {} for writing: {}",
                                            path, std::strerror(errno)));
  }
}

JsonLinesWriter::~JsonLinesWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonLinesWriter::Write(const MonitorSnapshot& snapshot) {
  if (failed_) return;
  std::string line = SnapshotToJson(snapshot).dump();
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    failed_ = true;
    Log(LogLevel::kWarning, fmt::format("monitor: writing {} failed ({}); JSON lines stop here",
                                        path_, std::strerror(errno)));
  }
}

}  // namespace gpufeed
