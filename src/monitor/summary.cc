#include "monitor/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>

namespace gpufeed {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Series {
  std::string unit;
  std::vector<double> values;
};

// Keeps metrics in the order they are first added, so the table reads GPU first, then host.
class SeriesTable {
 public:
  template <typename T>
  void Add(const std::string& name, const char* unit, const std::optional<T>& value,
           double scale = 1.0) {
    auto [it, inserted] = index_.emplace(name, series_.size());
    if (inserted) series_.push_back({name, Series{unit, {}}});
    if (value) series_[it->second].second.values.push_back(static_cast<double>(*value) * scale);
  }
  std::vector<std::pair<std::string, Series>>& series() { return series_; }

 private:
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, Series>> series_;
};

}  // namespace

double Percentile(const std::vector<double>& sorted, double q) {
  double rank = q * static_cast<double>(sorted.size() - 1);
  size_t low = static_cast<size_t>(rank);
  size_t high = std::min(low + 1, sorted.size() - 1);
  double fraction = rank - static_cast<double>(low);
  return sorted[low] + (sorted[high] - sorted[low]) * fraction;
}

MonitorSummary Summarize(const std::deque<MonitorSnapshot>& history,
                         const std::vector<std::string>& warnings) {
  MonitorSummary summary;
  summary.samples = history.size();
  summary.warnings = warnings;
  if (history.empty()) return summary;
  summary.duration_seconds = history.back().elapsed_seconds - history.front().elapsed_seconds;
  SeriesTable table;
  for (const MonitorSnapshot& s : history) {
    for (const GpuSample& g : s.gpus) {
      std::string gpu = fmt::format("gpu{}_", g.index);
      table.Add(gpu + "utilization", "%", g.utilization_ratio, 100.0);
      table.Add(gpu + "memory_utilization", "%", g.memory_utilization_ratio, 100.0);
      table.Add(gpu + "memory_used", "GiB", g.memory_used_bytes, 1 / kGiB);
      table.Add(gpu + "power", "W", g.power_watts);
      table.Add(gpu + "temperature", "C", g.temperature_celsius);
      table.Add(gpu + "sm_clock", "MHz", g.sm_clock_hertz, 1e-6);
      table.Add(gpu + "pcie_rx", "MB/s", g.pcie_rx_bytes_per_second, 1e-6);
      table.Add(gpu + "pcie_tx", "MB/s", g.pcie_tx_bytes_per_second, 1e-6);
      table.Add(gpu + "process_memory", "GiB", g.tree_memory_bytes, 1 / kGiB);
      table.Add(gpu + "process_sm_utilization", "%", g.tree_sm_utilization_ratio, 100.0);
    }
    const HostSample& h = s.host;
    table.Add("cpu_utilization", "%", h.cpu_utilization_ratio, 100.0);
    table.Add("ram_used", "GiB", h.memory_used_bytes, 1 / kGiB);
    table.Add("disk_read", "MB/s", h.disk_read_bytes_per_second, 1e-6);
    table.Add("process_cpu", "cores", h.tree_cpu_cores);
    table.Add("process_rss", "GiB", h.tree_rss_bytes, 1 / kGiB);
    table.Add("process_pss", "GiB", h.tree_pss_bytes, 1 / kGiB);
    table.Add("process_read", "MB/s", h.tree_read_bytes_per_second, 1e-6);
    table.Add("cgroup_memory_used", "GiB", h.cgroup_memory_used_bytes, 1 / kGiB);
  }
  for (auto& [name, series] : table.series()) {
    if (series.values.empty()) continue;
    std::sort(series.values.begin(), series.values.end());
    MetricSummary metric;
    metric.name = name;
    metric.unit = series.unit;
    metric.count = series.values.size();
    metric.mean = std::accumulate(series.values.begin(), series.values.end(), 0.0) /
                  static_cast<double>(series.values.size());
    metric.p5 = Percentile(series.values, 0.05);
    metric.p95 = Percentile(series.values, 0.95);
    summary.metrics.push_back(std::move(metric));
  }
  return summary;
}

std::string MonitorSummary::ToText() const {
  std::string text = fmt::format("gpufeed monitor: {} sample{} over {:.1f} s\n", samples,
                                 samples == 1 ? "" : "s", duration_seconds);
  if (!metrics.empty()) {
    text +=
        fmt::format("  {:<28} {:>10} {:>10} {:>10}  {}\n", "metric", "mean", "p5", "p95", "unit");
    for (const MetricSummary& m : metrics) {
      text += fmt::format("  {:<28} {:>10.2f} {:>10.2f} {:>10.2f}  {}\n", m.name, m.mean, m.p5,
                          m.p95, m.unit);
    }
  }
  for (const std::string& warning : warnings) text += fmt::format("warning: {}\n", warning);
  return text;
}

}  // namespace gpufeed
