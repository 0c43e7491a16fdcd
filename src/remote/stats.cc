// RemoteStats counters and the latency histogram.
#include "remote/stats.h"

#include <algorithm>
#include <cmath>

namespace gpufeed::remote {

void StatsRecorder::Request(bool retry, double latency_s) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (retry) retries_.fetch_add(1, std::memory_order_relaxed);
  latency_s = std::max(latency_s, 0.0);
  latency_ns_.fetch_add(static_cast<int64_t>(latency_s * 1e9), std::memory_order_relaxed);
  const double us = latency_s * 1e6;
  const int bucket = us < 1 ? 0 : std::clamp(static_cast<int>(4 * std::log2(us)), 0, kBuckets - 1);
  histogram_[bucket].fetch_add(1, std::memory_order_relaxed);
}

void StatsRecorder::EnterFlight() {
  const int now = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  int seen = max_in_flight_.load(std::memory_order_relaxed);
  while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
  }
}

RemoteStats StatsRecorder::Snapshot(int max_requests) const {
  RemoteStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.throttled = throttled_.load(std::memory_order_relaxed);
  s.failed = failed_.load(std::memory_order_relaxed);
  s.listings = listings_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.max_in_flight = max_in_flight_.load(std::memory_order_relaxed);
  s.max_requests = max_requests;
  std::array<int64_t, kBuckets> counts{};
  int64_t total = 0;
  for (int i = 0; i < kBuckets; ++i) {
    counts[i] = histogram_[i].load(std::memory_order_relaxed);
    total += counts[i];
  }
  if (total == 0) return s;
  s.latency_mean_s = static_cast<double>(latency_ns_.load(std::memory_order_relaxed)) / 1e9 /
                     static_cast<double>(total);
  const auto rank = static_cast<int64_t>(std::ceil(0.99 * static_cast<double>(total)));
  int64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) {
      s.latency_p99_s = std::exp2((i + 1) / 4.0) / 1e6;  // the bucket's upper edge
      break;
    }
  }
  return s;
}

}  // namespace gpufeed::remote
