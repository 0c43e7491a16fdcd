// What a Monitor reads and is asked to do: GpuSample, HostSample and ProcessSample (one GPU,
// the host and a process of the watched tree at one instant) gathered into a MonitorSnapshot;
// MetricSummary and MonitorSummary (a run summed up); MonitorOptions (interval, outputs,
// warning thresholds, callbacks); and the text forms of a snapshot (FormatStatusLine,
// FormatProcessLines). Plain value types and pure functions: a reading the driver or the OS
// does not give is an empty optional, never 0.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpufeed {

// One process of the watched tree on one GPU, from NVML's per-process queries
// (nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetProcessUtilization).
struct GpuProcessSample {
  pid_t pid = 0;
  std::optional<uint64_t> memory_bytes;        // its GPU memory; n/a when the driver hides it
  std::optional<double> sm_utilization_ratio;  // its share of SM time over the last period
};

// One GPU at one instant. Ratios are 0-1.
struct GpuSample {
  int index = 0;                                   // NVML index (not necessarily the CUDA index)
  std::string name;                                // "NVIDIA H100 80GB HBM3"
  std::optional<double> utilization_ratio;         // kernel duty cycle over the last period
  std::optional<double> memory_utilization_ratio;  // time memory was read or written
  std::optional<uint64_t> memory_used_bytes;       // v2 call: excludes driver-reserved memory
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> power_watts;
  std::optional<double> temperature_celsius;
  std::optional<double> sm_clock_hertz;
  std::optional<double> pcie_rx_bytes_per_second;  // host to GPU, a 20 ms window
  std::optional<double> pcie_tx_bytes_per_second;
  // Of the watched process tree only (NVML reports host PIDs: empty in a PID namespace).
  std::optional<uint64_t> tree_memory_bytes;
  std::optional<double> tree_sm_utilization_ratio;
  // The tree's processes NVML lists on this GPU (compute processes or utilization samples),
  // by pid.
  std::vector<GpuProcessSample> processes;
};

// One live process of the watched tree at one instant.
struct ProcessSample {
  pid_t pid = 0;
  pid_t ppid = 0;
  std::string name;                 // /proc/<pid>/stat's comm: "python3"
  std::optional<double> cpu_cores;  // its own user+system time over the interval; 1.0 = a core
  uint64_t rss_bytes = 0;
};

// The host at one instant. Rates are over the interval since the previous sample: the first
// sample of a run has none.
struct HostSample {
  int cpu_count = 0;                            // online CPUs
  std::optional<double> cpu_utilization_ratio;  // whole machine, from /proc/stat
  std::optional<uint64_t> memory_used_bytes;    // MemTotal - MemAvailable
  std::optional<uint64_t> memory_total_bytes;
  // Machine reads that reached a disk, from /proc/diskstats (whole disks; no loop or ram).
  std::optional<double> disk_read_bytes_per_second;
  std::optional<uint64_t> disk_read_bytes_total;

  // The watched process tree: the pid and every descendant alive at the sample.
  int tree_processes = 0;                            // 0 once the watched process is gone
  std::optional<double> tree_cpu_cores;              // 1.0 = one core fully busy
  std::optional<double> tree_cpu_seconds_total;      // since the tree started, reaped included
  std::optional<uint64_t> tree_rss_bytes;            // sums shared pages once per process
  std::optional<uint64_t> tree_pss_bytes;            // smaps_rollup: shared pages split
  std::optional<double> tree_read_bytes_per_second;  // /proc/<pid>/io read_bytes
  std::optional<uint64_t> tree_read_bytes_total;
  std::vector<ProcessSample> processes;  // the live members, the root first, then by depth

  // cgroup v2 of the watched process, where the controllers are there.
  std::optional<double> cgroup_cpu_limit_cores;  // cpu.max quota / period
  std::optional<double> cgroup_cpu_throttled_seconds_total;
  std::optional<uint64_t> cgroup_cpu_throttled_periods_total;
  std::optional<uint64_t> cgroup_memory_limit_bytes;  // memory.max
  std::optional<uint64_t> cgroup_memory_used_bytes;   // memory.current
};

struct MonitorSnapshot {
  double elapsed_seconds = 0;  // since Start (or the first sample), on the monitor's clock
  int64_t unix_millis = 0;     // wall time, for logs
  HostSample host;
  std::vector<GpuSample> gpus;  // empty without NVML
};

struct MetricSummary {
  std::string name;  // "gpu0_utilization_percent"
  std::string unit;  // "%", "GiB", "cores", "W", "C", "MHz", "MB/s"
  size_t count = 0;  // samples that had the reading
  double mean = 0;
  double p5 = 0;
  double p95 = 0;
};

struct MonitorSummary {
  double duration_seconds = 0;
  size_t samples = 0;
  std::vector<MetricSummary> metrics;  // only metrics with at least one reading
  std::vector<std::string> warnings;
  // A table a person reads: one metric a line with mean, p5 and p95, then the warnings.
  std::string ToText() const;
};

struct MonitorOptions {
  // Default: 1 s. At least 100 ms: Error(kInvalidArgument) below that.
  std::chrono::milliseconds interval{1000};
  pid_t pid = 0;  // Default: 0 = this process. The root of the watched process tree.
  // Default: empty = $GPUFEED_NVML_LIBRARY, else "libnvidia-ml.so.1".
  std::string nvml_library;
  std::string jsonl_path;  // Default: empty = no JSON lines. Truncated at Start.
  // Default: empty = no HTTP server. "PORT", "HOST:PORT" or "[V6]:PORT"; HOST defaults to
  // 127.0.0.1. Port 0 picks a free port (see prometheus_port()).
  std::string prometheus_address;
  // Default: 0.30 and 10 s: warn when a GPU's utilization stays below the ratio that long.
  double low_utilization_ratio = 0.30;
  std::chrono::milliseconds low_utilization_duration{10000};
  size_t history_limit = 100000;  // Default: 100000 snapshots (28 h at 1 s); oldest dropped
  // Default: none. Stall figures of an attached loader, appended to the low-utilization
  // warning ("waiting on data 72% of the time; slowest stage: read").
  std::function<std::string()> stall_summary;
  // Default: none. Called with every new snapshot.
  std::function<void(const MonitorSnapshot&)> on_sample;
  // Default: none. Called with every warning when it fires.
  std::function<void(const std::string&)> on_warning;
  // Default: nullptr. A stream to print the live line and warnings to: \r-updated on a
  // terminal, one line per sample otherwise.
  FILE* live_line = nullptr;
  // Default: false. With live_line: one more line per process of the tree below it
  // (FormatProcessLines), redrawn in place on a terminal.
  bool process_lines = false;
  // Default: steady_clock::now. Tests pass a manual clock so rules do not depend on timing.
  std::function<std::chrono::steady_clock::time_point()> clock;
  // Default: "/proc". Tests point it at a fake tree.
  std::string proc_root = "/proc";
  // Default: "/sys/fs/cgroup". The cgroup v2 mount.
  std::string cgroup_root = "/sys/fs/cgroup";
};

// `GPU 85% | VRAM 12.3/24.0 GiB (51%) | CPU 45% | RAM 18.4/64.0 GiB (29%)`, one GPU/VRAM
// pair per GPU (`GPU0`, `GPU1`, ... when there are several), `n/a` for missing readings,
// then the watched tree: `| proc 1.8 cores, RSS 3.2 GiB`.
std::string FormatStatusLine(const MonitorSnapshot& snapshot);

// One line per live process of the watched tree, the root first:
// `  pid 4242 python3      CPU  98% RSS 1.2 GiB | GPU0 SM 45% VRAM 3.2 GiB`
// (`GPU n/a` without NVML; `GPU -` when NVML lists the process on no GPU).
std::vector<std::string> FormatProcessLines(const MonitorSnapshot& snapshot);

}  // namespace gpufeed
