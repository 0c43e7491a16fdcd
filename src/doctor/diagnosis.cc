#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/system/proc_text.h"
#include "core/system/system_memory.h"
#include "doctor/figures.h"
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
  j["batches"] = batches;
  j["measured_seconds"] = measured_seconds;
  j["starved_fraction"] =
      starved_fraction >= 0 ? nlohmann::json(starved_fraction) : nlohmann::json();
  nlohmann::json path = nlohmann::json::object();
  for (const auto& [where, share] : wait_path) path[where] = share;
  j["wait_path"] = path;
  return j.dump();
}

namespace {

constexpr int64_t kWarmupBatches = 2;        // the first batches after start-up, reported apart
constexpr size_t kMostBatchesJudged = 4096;  // as many as a loader keeps

// Leaves the first batches after start-up out of `in.batches` when the window holds them
// (`delivered`: every batch the loader handed out; the newest may still be open, not in the
// window), counting them apart.
void SetWarmupApart(DoctorInput& in, int64_t delivered) {
  const auto window = static_cast<int64_t>(in.batches.size());
  const int64_t before_window = std::max<int64_t>(0, delivered - window - 1);
  const int64_t warm = std::min(window - 1, kWarmupBatches - before_window);
  if (warm <= 0) return;
  for (int64_t i = 0; i < warm; ++i) {
    const BatchTiming& b = in.batches[static_cast<size_t>(i)];
    in.warmup_seconds += 1e-9 * static_cast<double>(b.consumer_wait_ns + b.step_ns);
  }
  in.warmup_batches = warm;
  in.batches.erase(in.batches.begin(), in.batches.begin() + warm);
}

// The busiest processes on the machine over `span`: "pid 4242 cc1plus: 0.98 cores", at most
// `n`, busiest first. Reads /proc/<pid>/stat twice; processes that come or go meanwhile are
// skipped.
std::vector<std::string> TopCpuProcesses(std::chrono::milliseconds span, size_t n) {
  const auto sample = [] {
    std::map<pid_t, std::pair<uint64_t, std::string>> ticks;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string text, comm;
      if (!ReadTextFile(entry.path().string() + "/stat", &text)) continue;
      const auto stat = ParsePidStat(text);
      if (!stat) continue;
      const size_t open = text.find('('), close = text.rfind(')');
      if (open != std::string::npos && close != std::string::npos && close > open) {
        comm = text.substr(open + 1, close - open - 1);
      }
      ticks[stat->pid] = {stat->utime + stat->stime, comm};
    }
    return ticks;
  };
  const auto before = sample();
  std::this_thread::sleep_for(span);
  const auto after = sample();
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double seconds = std::chrono::duration<double>(span).count();
  std::vector<std::pair<double, std::string>> busiest;
  for (const auto& [pid, now] : after) {
    const auto was = before.find(pid);
    if (was == before.end() || now.first < was->second.first) continue;
    const double cores = static_cast<double>(now.first - was->second.first) / hz / seconds;
    if (cores < 0.05) continue;
    busiest.emplace_back(cores, fmt::format("pid {} {}{}: {:.2f} cores", pid, now.second,
                                            pid == getpid() ? " (this process)" : "", cores));
  }
  std::sort(busiest.begin(), busiest.end(), std::greater<>());
  std::vector<std::string> out;
  for (size_t i = 0; i < busiest.size() && i < n; ++i) out.push_back(busiest[i].second);
  return out;
}

// Keeps the last `window` batches of `in.batches`, or as many more as cover min_seconds of the
// loop's time (a fast loop's 64 batches can be a fraction of a second).
void KeepJudgedWindow(DoctorInput& in, size_t window) {
  size_t keep = 0;
  double seconds = 0;
  for (auto it = in.batches.rbegin(); it != in.batches.rend(); ++it, ++keep) {
    if (keep >= window && seconds >= in.min_seconds) break;
    seconds += 1e-9 * static_cast<double>(it->consumer_wait_ns + it->step_ns);
  }
  in.batches.erase(in.batches.begin(),
                   in.batches.begin() + static_cast<std::ptrdiff_t>(in.batches.size() - keep));
}

// What the loader is set to and what it reads: parallelism, batch and sample sizes, the
// source's cache tier, block and chunking.
void SetLoaderShape(DoctorInput& in, const Loader& loader) {
  const LoaderOptions& o = loader.options();
  in.workers = loader.workers();
  in.prefetch = loader.prefetch();
  in.max_workers = o.max_workers;
  in.batch_size = o.batch_size;
  in.sample_bytes = static_cast<double>(loader.schema().SampleBytes());
  in.dataset_samples = loader.source().size();
  in.device_copy = loader.device().needs_copy();
  in.cache = loader.source().cache_tier();
  in.source_block = loader.source().PreferredBlock();
  const SourceChunking chunking = loader.source().chunking();
  in.source_pieces_per_sample = chunking.pieces_per_sample;
  in.pieces_field = chunking.pieces_field;
  in.pieces_chunk_shape = chunking.pieces_chunk_shape;
  for (const auto& field : loader.source().schema().fields) {
    if (field.name == chunking.pieces_field) in.pieces_sample_shape = field.shape;
  }
  in.block_shuffle = o.shuffle_block != 0;
  const SourceStats source = loader.source().Stats();
  in.varlen_items = source.varlen_items;
  in.varlen_pad_items = source.varlen_pad_items;
  in.varlen_truncated_items = source.varlen_truncated_items;
}

// The event figures of the judged window: steps with both a busy and an idle figure.
void SetGpuEventFigures(DoctorInput& in) {
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
}

// The monitor's latest host and GPU readings, which replace the loader's own where present,
// and the CPU throttling over the last ~10 s of `history`. REQUIRES: !history.empty().
void SetMonitorReadings(DoctorInput& in, const std::vector<MonitorSnapshot>& history) {
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
}

}  // namespace

DoctorInput CollectDoctorInput(const Loader& loader, const Monitor* monitor, size_t window) {
  DoctorInput in;
  in.batches = loader.RecentBatches(std::max<size_t>(window, kMostBatchesJudged));
  KeepJudgedWindow(in, window);
  const LoaderStats stats = loader.stats();
  SetWarmupApart(in, stats.batches);
  // Starved threads: name who takes the cores (a fifth of a second of sampling, only then).
  if (const doctor::Totals t = doctor::Sum(in.batches);
      t.wait_with_runqueue > 0 && t.starved >= 0.3 * t.wait_with_runqueue) {
    in.top_cpu_processes = TopCpuProcesses(std::chrono::milliseconds(200), 3);
  }
  SetLoaderShape(in, loader);
  if (stats.storage_read_bytes >= 0) {
    in.storage_read_bytes = static_cast<uint64_t>(stats.storage_read_bytes);
  }
  in.delivered_bytes = static_cast<uint64_t>(std::max<int64_t>(0, stats.bytes));
  in.remote = stats.remote;
  const DeviceMemoryInfo ram = HostDevice()->MemoryInfo();
  in.cpu_count = OnlineCpus();
  in.ram_available_bytes = ram.free_bytes;
  in.ram_total_bytes = ram.total_bytes;
  SetGpuEventFigures(in);
  if (monitor == nullptr) return in;
  const auto history = monitor->History();
  if (!history.empty()) SetMonitorReadings(in, history);
  return in;
}

}  // namespace gpufeed
