#include <fmt/format.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "gpufeed/doctor.h"

namespace gpufeed {

std::string Diagnosis::ToText() const {
  std::string out = fmt::format("Doctor: {}\n  {}\n", VerdictName(verdict), headline);
  for (const auto& e : evidence) out += fmt::format("  - {}\n", e);
  for (const auto& a : advice) out += fmt::format("  > {}\n", a);
  return out;
}

std::string Diagnosis::ToJson() const {
  nlohmann::json j = {{"verdict", VerdictName(verdict)},
                      {"stage", StageName(stage)},
                      {"headline", headline},
                      {"evidence", evidence},
                      {"advice", advice},
                      {"consumer_wait_fraction", consumer_wait_fraction},
                      {"worker_busy_fraction", worker_busy_fraction},
                      {"gpu_measure", gpu_measure}};
  j["gpu_busy_fraction"] =
      gpu_busy_fraction >= 0 ? nlohmann::json(gpu_busy_fraction) : nlohmann::json();
  return j.dump();
}

DoctorInput CollectDoctorInput(const Loader& loader, const Monitor* monitor, size_t window) {
  DoctorInput in;
  const LoaderOptions& o = loader.options();
  in.batches = loader.RecentBatches(window);
  in.workers = loader.workers();
  in.prefetch = loader.prefetch();
  in.max_workers = o.max_workers;
  in.batch_size = o.batch_size;
  in.sample_bytes = static_cast<double>(loader.schema().SampleBytes());
  in.dataset_samples = loader.source().size();
  in.device_copy = loader.device().needs_copy();
  in.cache = loader.source().cache_tier();
  in.source_block = loader.source().PreferredBlock();
  in.block_shuffle = o.shuffle_block != 0;
  const LoaderStats stats = loader.stats();
  if (stats.storage_read_bytes >= 0) {
    in.storage_read_bytes = static_cast<uint64_t>(stats.storage_read_bytes);
  }
  in.delivered_bytes = static_cast<uint64_t>(std::max<int64_t>(0, stats.bytes));
  const DeviceMemoryInfo ram = HostDevice()->MemoryInfo();
  in.cpu_count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  in.ram_available_bytes = ram.free_bytes;
  in.ram_total_bytes = ram.total_bytes;
  // The event figures of the same window: steps with both a busy and an idle figure.
  int64_t busy = 0, idle = 0;
  for (const BatchTiming& b : in.batches) {
    if (b.gpu_drained) ++in.gpu_drained_steps;
    if (b.gpu_busy_ns < 0 || b.gpu_idle_ns < 0) continue;
    ++in.gpu_event_steps;
    busy += b.gpu_busy_ns;
    idle += b.gpu_idle_ns;
  }
  if (in.gpu_event_steps > 0 && busy + idle > 0) {
    in.gpu_busy_events = static_cast<double>(busy) / static_cast<double>(busy + idle);
  }
  if (monitor == nullptr) return in;
  const auto history = monitor->History();
  if (history.empty()) return in;
  const MonitorSnapshot& last = history.back();
  const HostSample& h = last.host;
  in.cpu_count = h.cpu_count > 0 ? h.cpu_count : in.cpu_count;
  in.cpu_limit_cores = h.cgroup_cpu_limit_cores;
  in.process_cpu_cores = h.tree_cpu_cores;
  in.machine_cpu_ratio = h.cpu_utilization_ratio;
  if (h.memory_total_bytes && h.memory_used_bytes) {
    in.ram_total_bytes = *h.memory_total_bytes;
    in.ram_available_bytes = *h.memory_total_bytes - *h.memory_used_bytes;
  }
  in.cgroup_memory_limit_bytes = h.cgroup_memory_limit_bytes;
  in.cgroup_memory_used_bytes = h.cgroup_memory_used_bytes;
  in.disk_read_bytes_per_second = h.disk_read_bytes_per_second;
  // Throttling over the last ~10 s of history.
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    const double span = last.elapsed_seconds - it->elapsed_seconds;
    if (span >= 10 || std::next(it) == history.rend()) {
      if (span > 0 && h.cgroup_cpu_throttled_seconds_total &&
          it->host.cgroup_cpu_throttled_seconds_total) {
        in.throttled_fraction =
            (*h.cgroup_cpu_throttled_seconds_total - *it->host.cgroup_cpu_throttled_seconds_total) /
            span;
      }
      break;
    }
  }
  if (!last.gpus.empty()) {
    const GpuSample& g = last.gpus.front();
    in.gpu_utilization = g.utilization_ratio;
    in.vram_used_bytes = g.memory_used_bytes;
    in.vram_total_bytes = g.memory_total_bytes;
  }
  return in;
}

}  // namespace gpufeed
