// The counters behind RemoteStats: atomics, and a fixed-bucket log histogram of request
// latencies for the mean and p99.
// Thread-safety: thread-safe; every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "gpufeed/remote.h"

namespace gpufeed::remote {

class StatsRecorder {
 public:
  void Request(bool retry, double latency_s);
  void Throttled() { throttled_.fetch_add(1, std::memory_order_relaxed); }
  void Failed() { failed_.fetch_add(1, std::memory_order_relaxed); }
  void Listing() { listings_.fetch_add(1, std::memory_order_relaxed); }
  void Bytes(int64_t n) { bytes_.fetch_add(n, std::memory_order_relaxed); }
  void EnterFlight();
  void LeaveFlight() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  RemoteStats Snapshot(int max_requests) const;

 private:
  // Bucket i holds latencies in [2^(i/4), 2^((i+1)/4)) microseconds: 19 % wide, up to ~36 min.
  static constexpr int kBuckets = 128;
  std::atomic<int64_t> requests_{0}, retries_{0}, throttled_{0}, failed_{0}, listings_{0};
  std::atomic<int64_t> bytes_{0}, latency_ns_{0};
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
  std::array<std::atomic<int64_t>, kBuckets> histogram_{};
};

}  // namespace gpufeed::remote
