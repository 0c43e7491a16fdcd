#include "sources/hdf5/read/chunk_prefetch.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/checked_math.h"

namespace gpufeed {

ChunkPrefetcher::ChunkPrefetcher(int reads_in_flight)
    : reads_in_flight_(std::clamp(reads_in_flight, 1, kMaxThreads)) {}

int64_t ChunkPrefetcher::ReachSamples(int64_t block, uint64_t bytes_per_sample,
                                      uint64_t cache_capacity) const {
  const uint64_t fits = cache_capacity / 4 / std::max<uint64_t>(1, bytes_per_sample);
  const uint64_t want = CheckedMul(static_cast<uint64_t>(std::max<int64_t>(1, block)),
                                   static_cast<uint64_t>(reads_in_flight_))
                            .value_or(UINT64_MAX);
  return static_cast<int64_t>(std::min(want, fits));  // fits < 2^62: a quarter of a size_t
}

void ChunkPrefetcher::Submit(std::shared_ptr<const File> file, std::shared_ptr<Hdf5ReadAhead> ahead,
                             std::atomic<int64_t>* bytes_read) {
  std::call_once(pool_once_, [this] {
    pool_ = std::make_unique<ThreadPool>(std::max(kMinThreads, reads_in_flight_));
  });
  outstanding_.fetch_add(ahead->bytes, std::memory_order_relaxed);
  try {
    pool_->Submit([this, file = std::move(file), ahead, bytes_read](int) {
      Fetch(*file, *ahead, bytes_read);
    });
  } catch (...) {
    outstanding_.fetch_sub(ahead->bytes, std::memory_order_relaxed);
    throw;
  }
}

void ChunkPrefetcher::Fetch(const File& file, Hdf5ReadAhead& ahead,
                            std::atomic<int64_t>* bytes_read) {
  try {
    file.ReadMany(ahead.ranges, "chunk data");
    bytes_read->fetch_add(static_cast<int64_t>(ahead.bytes), std::memory_order_relaxed);
    for (size_t i = 0; i < ahead.fetches.size(); ++i) {
      ahead.fetches[i].Finish(std::move(ahead.buffers[i]));
    }
  } catch (...) {
  }
  ahead.fetches.clear();  // abandons those not finished
  outstanding_.fetch_sub(ahead.bytes, std::memory_order_relaxed);
}

}  // namespace gpufeed
