// TenthsProgress: "40% done" lines for a long job (a preload, an shm build, a device
// upload) through the log sink: at most one per tenth, only once the job has run
// `quiet_seconds` (2 s: a short one says nothing), never "100%" (the caller says when it is
// done).
// Thread-safety: thread-safe; Add is called by every worker of the job.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace gpufeed {

class TenthsProgress {
 public:
  // The line for `percent` done (10..90), `done` of `total` units after `seconds`.
  using Line = std::function<std::string(int percent, uint64_t done, double seconds)>;

  // Silent when `enabled` is false or `total` is 0.
  TenthsProgress(bool enabled, uint64_t total, Line line, double quiet_seconds = 2.0);

  // `units` more are done.
  void Add(uint64_t units);

 private:
  const bool enabled_;
  const uint64_t total_;
  const Line line_;
  const double quiet_seconds_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;
  int printed_ = 0;  // guarded by mu_: the last tenth logged
};

}  // namespace gpufeed
