#include "monitor/prometheus_text.h"

#include <fmt/format.h>

#include <optional>
#include <utility>
#include <vector>

namespace gpufeed {
namespace {

// `"` `\` and newline are the characters a label value must escape.
std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Exposition {
 public:
  // One family: its samples as (labels, value); written only when it has any.
  struct Sample {
    std::string labels;  // `gpu="0"` or empty
    double value;
  };
  void Family(const char* name, const char* type, const char* help,
              const std::vector<Sample>& samples) {
    if (samples.empty()) return;
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const Sample& sample : samples) {
      if (sample.labels.empty()) {
        text_ += fmt::format("{} {}\n", name, sample.value);
      } else {
        text_ += fmt::format("{}{{{}}} {}\n", name, sample.labels, sample.value);
      }
    }
  }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
};

template <typename T>
std::vector<Exposition::Sample> One(const std::optional<T>& value) {
  if (!value) return {};
  return {{"", static_cast<double>(*value)}};
}

// One sample per GPU that has the reading.
template <typename Getter>
std::vector<Exposition::Sample> PerGpu(const MonitorSnapshot& snapshot, Getter get) {
  std::vector<Exposition::Sample> samples;
  for (const GpuSample& gpu : snapshot.gpus) {
    auto value = get(gpu);
    if (value) {
      samples.push_back({fmt::format("gpu=\"{}\",name=\"{}\"", gpu.index, EscapeLabel(gpu.name)),
                         static_cast<double>(*value)});
    }
  }
  return samples;
}

}  // namespace

std::string RenderPrometheusText(const MonitorSnapshot* latest, const MonitorCounters& counters) {
  Exposition out;
  out.Family("gpufeed_monitor_samples_total", "counter", "Samples taken by the monitor.",
             {{"", static_cast<double>(counters.samples)}});
  out.Family("gpufeed_monitor_low_utilization_warnings_total", "counter",
             "Warnings that a GPU stayed below the utilization threshold.",
             {{"", static_cast<double>(counters.warnings)}});
  out.Family("gpufeed_nvml_up", "gauge", "1 when the NVML library is loaded, else 0.",
             {{"", counters.nvml_loaded ? 1.0 : 0.0}});
  if (latest == nullptr) return out.Take();
  const MonitorSnapshot& s = *latest;
  const HostSample& h = s.host;

  out.Family("gpufeed_gpu_utilization_ratio", "gauge",
             "Fraction of the last sample period in which a kernel ran on the GPU.",
             PerGpu(s, [](const GpuSample& g) { return g.utilization_ratio; }));
  out.Family("gpufeed_gpu_memory_utilization_ratio", "gauge",
             "Fraction of the last sample period in which GPU memory was read or written.",
             PerGpu(s, [](const GpuSample& g) { return g.memory_utilization_ratio; }));
  out.Family("gpufeed_gpu_memory_used_bytes", "gauge", "GPU memory in use.",
             PerGpu(s, [](const GpuSample& g) { return g.memory_used_bytes; }));
  out.Family("gpufeed_gpu_memory_total_bytes", "gauge", "GPU memory in all.",
             PerGpu(s, [](const GpuSample& g) { return g.memory_total_bytes; }));
  out.Family("gpufeed_gpu_power_watts", "gauge", "GPU power draw.",
             PerGpu(s, [](const GpuSample& g) { return g.power_watts; }));
  out.Family("gpufeed_gpu_temperature_celsius", "gauge", "GPU core temperature.",
             PerGpu(s, [](const GpuSample& g) { return g.temperature_celsius; }));
  out.Family("gpufeed_gpu_sm_clock_hertz", "gauge", "GPU SM clock.",
             PerGpu(s, [](const GpuSample& g) { return g.sm_clock_hertz; }));
  out.Family("gpufeed_gpu_pcie_receive_bytes_per_second", "gauge",
             "PCIe traffic into the GPU over a 20 ms window.",
             PerGpu(s, [](const GpuSample& g) { return g.pcie_rx_bytes_per_second; }));
  out.Family("gpufeed_gpu_pcie_transmit_bytes_per_second", "gauge",
             "PCIe traffic out of the GPU over a 20 ms window.",
             PerGpu(s, [](const GpuSample& g) { return g.pcie_tx_bytes_per_second; }));
  out.Family("gpufeed_gpu_process_memory_used_bytes", "gauge",
             "GPU memory used by the watched process tree.",
             PerGpu(s, [](const GpuSample& g) { return g.tree_memory_bytes; }));
  out.Family("gpufeed_gpu_process_sm_utilization_ratio", "gauge",
             "SM utilization of the watched process tree.",
             PerGpu(s, [](const GpuSample& g) { return g.tree_sm_utilization_ratio; }));

  out.Family("gpufeed_cpu_utilization_ratio", "gauge",
             "Fraction of the machine's CPU time that was busy over the last interval.",
             One(h.cpu_utilization_ratio));
  out.Family("gpufeed_cpus", "gauge", "Online CPUs of the machine.",
             One(std::optional<int>(h.cpu_count)));
  out.Family("gpufeed_memory_used_bytes", "gauge", "Machine RAM in use (total - available).",
             One(h.memory_used_bytes));
  out.Family("gpufeed_memory_total_bytes", "gauge", "Machine RAM in all.",
             One(h.memory_total_bytes));
  out.Family("gpufeed_disk_read_bytes_total", "counter",
             "Bytes read from whole disks (/proc/diskstats).", One(h.disk_read_bytes_total));
  out.Family("gpufeed_watched_processes", "gauge", "Live processes in the watched process tree.",
             One(std::optional<int>(h.tree_processes)));
  out.Family("gpufeed_process_cpu_seconds_total", "counter",
             "CPU time of the watched process tree, exited children included.",
             One(h.tree_cpu_seconds_total));
  out.Family("gpufeed_process_resident_memory_bytes", "gauge",
             "Resident memory of the watched process tree (RSS summed per process).",
             One(h.tree_rss_bytes));
  out.Family("gpufeed_process_proportional_memory_bytes", "gauge",
             "Proportional set size (PSS) of the watched process tree.", One(h.tree_pss_bytes));
  out.Family("gpufeed_process_read_bytes_total", "counter",
             "Bytes the watched process tree read from storage (/proc/<pid>/io read_bytes).",
             One(h.tree_read_bytes_total));
  out.Family("gpufeed_cgroup_cpu_limit_cores", "gauge", "CPU quota of the cgroup, in cores.",
             One(h.cgroup_cpu_limit_cores));
  out.Family("gpufeed_cgroup_cpu_throttled_seconds_total", "counter",
             "Time the cgroup was throttled by its CPU quota.",
             One(h.cgroup_cpu_throttled_seconds_total));
  out.Family("gpufeed_cgroup_cpu_throttled_periods_total", "counter",
             "Scheduler periods in which the cgroup was throttled.",
             One(h.cgroup_cpu_throttled_periods_total));
  out.Family("gpufeed_cgroup_memory_limit_bytes", "gauge", "Memory limit of the cgroup.",
             One(h.cgroup_memory_limit_bytes));
  out.Family("gpufeed_cgroup_memory_used_bytes", "gauge", "Memory charged to the cgroup.",
             One(h.cgroup_memory_used_bytes));
  return out.Take();
}

}  // namespace gpufeed
