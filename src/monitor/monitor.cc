// Monitor (gpufeed/monitor.h): the sampler thread and what each sample feeds.
#include "gpufeed/monitor.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "gpufeed/error.h"
#include "monitor/gpu_probe.h"
#include "monitor/host_probe.h"
#include "monitor/low_utilization_rule.h"
#include "monitor/metrics_http_server.h"
#include "monitor/prometheus_text.h"
#include "monitor/snapshot_json.h"
#include "monitor/status_line.h"
#include "monitor/summary.h"

namespace gpufeed {
namespace {

constexpr std::chrono::milliseconds kMinInterval{100};

MonitorOptions Checked(MonitorOptions options) {
  if (options.interval < kMinInterval) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("monitor interval {} ms is below the minimum of {} ms",
                            options.interval.count(), kMinInterval.count()));
  }
  if (!(options.low_utilization_ratio >= 0 && options.low_utilization_ratio <= 1)) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("low_utilization_ratio {} is not within 0-1", options.low_utilization_ratio));
  }
  if (options.low_utilization_duration.count() <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "low_utilization_duration must be positive");
  }
  if (options.history_limit == 0) {
    throw Error(ErrorCode::kInvalidArgument, "history_limit must be at least 1");
  }
  if (options.pid < 0) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("bad PID {}", options.pid));
  }
  if (options.pid == 0) options.pid = getpid();
  if (access(fmt::format("{}/{}/stat", options.proc_root, options.pid).c_str(), F_OK) != 0) {
    throw Error(ErrorCode::kNotFound, fmt::format("no process with PID {}", options.pid));
  }
  if (!options.clock) options.clock = [] { return std::chrono::steady_clock::now(); };
  return options;
}

}  // namespace

class Monitor::Impl {
 public:
  explicit Impl(MonitorOptions options)
      : options_(Checked(std::move(options))),
        gpu_(options_.nvml_library),
        host_(options_.proc_root, options_.cgroup_root, options_.pid) {
    counters_.nvml_loaded = gpu_.available();
    if (!options_.prometheus_address.empty()) {
      server_ = std::make_unique<MetricsHttpServer>(options_.prometheus_address,
                                                    [this] { return RenderMetrics(); });
    }
  }

  ~Impl() { Stop(); }

  void Start() {
    std::lock_guard<std::mutex> thread_lock(thread_mutex_);
    if (thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(sample_mutex_);
      if (!options_.jsonl_path.empty() && !jsonl_) {
        jsonl_ = std::make_unique<JsonLinesWriter>(options_.jsonl_path);
      }
      if (options_.live_line != nullptr && !printer_) {
        printer_ = std::make_unique<StatusLinePrinter>(options_.live_line);
        if (!gpu_.available()) printer_->Message(gpu_.status());  // once, up front
      }
      if (!start_time_) start_time_ = options_.clock();
    }
    SampleNow();
    stop_requested_ = false;
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> thread_lock(thread_mutex_);
      if (!thread_.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(wake_mutex_);
        stop_requested_ = true;
      }
      wake_.notify_all();
      thread_.join();
    }
    std::lock_guard<std::mutex> lock(sample_mutex_);
    if (printer_) printer_->Finish();
  }

  MonitorSnapshot SampleNow() {
    std::vector<std::string> fired;
    MonitorSnapshot snapshot;
    std::lock_guard<std::mutex> lock(sample_mutex_);
    auto now = options_.clock();
    if (!start_time_) start_time_ = now;
    snapshot.elapsed_seconds = std::chrono::duration<double>(now - *start_time_).count();
    snapshot.unix_millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    std::vector<pid_t> pids;
    snapshot.host = host_.Sample(now, &pids);
    snapshot.gpus = gpu_.Sample(std::unordered_set<pid_t>(pids.begin(), pids.end()));

    for (const GpuSample& gpu : snapshot.gpus) {
      auto [it, inserted] = rules_.try_emplace(
          gpu.index, options_.low_utilization_ratio,
          std::chrono::duration<double>(options_.low_utilization_duration).count());
      auto stretch = it->second.Observe(snapshot.elapsed_seconds, gpu.utilization_ratio);
      if (!stretch) continue;
      std::string warning = fmt::format(
          "GPU {} utilization below {:.0f}% for {:.1f} s (t={:.1f}-{:.1f} s, mean {:.0f}%)",
          gpu.index, options_.low_utilization_ratio * 100,
          stretch->end_seconds - stretch->start_seconds, stretch->start_seconds,
          stretch->end_seconds, stretch->mean_ratio * 100);
      if (options_.stall_summary) {
        std::string stalls = options_.stall_summary();
        if (!stalls.empty()) warning += "; loader: " + stalls;
      }
      fired.push_back(std::move(warning));
    }
    if (jsonl_) jsonl_->Write(snapshot);
    {
      std::lock_guard<std::mutex> state_lock(state_mutex_);
      history_.push_back(snapshot);
      while (history_.size() > options_.history_limit) history_.pop_front();
      warnings_.insert(warnings_.end(), fired.begin(), fired.end());
      counters_.samples += 1;
      counters_.warnings += fired.size();
    }
    if (printer_) {
      for (const std::string& warning : fired) printer_->Message("warning: " + warning);
      std::string block = FormatStatusLine(snapshot);
      if (options_.process_lines) {
        for (const std::string& line : FormatProcessLines(snapshot)) block += "\n" + line;
      }
      printer_->Update(block);
    }
    if (options_.on_warning) {
      for (const std::string& warning : fired) options_.on_warning(warning);
    }
    if (options_.on_sample) options_.on_sample(snapshot);
    return snapshot;
  }

  std::optional<MonitorSnapshot> Latest() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (history_.empty()) return std::nullopt;
    return history_.back();
  }

  std::vector<MonitorSnapshot> History() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return {history_.begin(), history_.end()};
  }

  std::vector<std::string> Warnings() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return warnings_;
  }

  MonitorSummary Summary() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return Summarize(history_, warnings_);
  }

  std::string nvml_status() const { return gpu_.status(); }
  int prometheus_port() const { return server_ ? server_->port() : 0; }

 private:
  // The sampler thread. Deadlines advance by the interval so sampling does not drift; after
  // a stall (a suspended process) it restarts from now instead of sampling in a burst.
  void Run() {
    auto next = std::chrono::steady_clock::now() + options_.interval;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(wake_mutex_);
        if (wake_.wait_until(lock, next, [this] { return stop_requested_; })) return;
      }
      SampleNow();
      next += options_.interval;
      auto now = std::chrono::steady_clock::now();
      if (next < now) next = now + options_.interval;
    }
  }

  std::string RenderMetrics() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return RenderPrometheusText(history_.empty() ? nullptr : &history_.back(), counters_);
  }

  const MonitorOptions options_;

  // Lock order: thread_mutex_, then sample_mutex_, then state_mutex_ or wake_mutex_.
  std::mutex thread_mutex_;  // Start/Stop
  std::thread thread_;

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stop_requested_ = false;  // guarded by wake_mutex_

  std::mutex sample_mutex_;  // one sample at a time: the probes keep deltas
  GpuProbe gpu_;
  HostProbe host_;
  std::map<int, LowUtilizationRule> rules_;
  std::unique_ptr<JsonLinesWriter> jsonl_;
  std::unique_ptr<StatusLinePrinter> printer_;
  std::optional<std::chrono::steady_clock::time_point> start_time_;

  mutable std::mutex state_mutex_;
  std::deque<MonitorSnapshot> history_;
  std::vector<std::string> warnings_;
  MonitorCounters counters_;

  // Last: destroyed first, so its thread never renders from destroyed state.
  std::unique_ptr<MetricsHttpServer> server_;
};

Monitor::Monitor(MonitorOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Monitor::~Monitor() = default;
void Monitor::Start() { impl_->Start(); }
void Monitor::Stop() { impl_->Stop(); }
MonitorSnapshot Monitor::SampleNow() { return impl_->SampleNow(); }
std::optional<MonitorSnapshot> Monitor::Latest() const { return impl_->Latest(); }
std::vector<MonitorSnapshot> Monitor::History() const { return impl_->History(); }
std::vector<std::string> Monitor::Warnings() const { return impl_->Warnings(); }
MonitorSummary Monitor::Summary() const { return impl_->Summary(); }
std::string Monitor::nvml_status() const { return impl_->nvml_status(); }
int Monitor::prometheus_port() const { return impl_->prometheus_port(); }

}  // namespace gpufeed
