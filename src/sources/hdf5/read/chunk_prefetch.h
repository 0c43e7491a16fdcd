// Whole chunks of remote objects fetched ahead of the batches that read them, on threads of their
// own (a worker's ReadMany blocks it, so workers alone keep at most one window's fetch each out),
// so that requests stay in flight while the workers build batches that need none. The HDF5 source
// claims the chunks (Hdf5DatasetReader::ClaimAhead); this fetches them, hands each to the workers
// waiting for it and keeps it in the chunk cache.
//
// How far ahead: as many chunks as the store takes requests at once (File::ReadsInFlight), each
// hinted batch's chunks one fetch on a thread of its own. Block-shuffled batches of about a chunk
// each, hinted only as far as the batches in flight, would keep a few requests out where a store
// serves dozens side by side, and the loader would wait on round trips. Within a quarter of the
// chunk cache: a chunk fetched ahead must still be held when its batch comes (beyond that, hints
// fetch chunks that are evicted before use, and their batches fetch them again).
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/thread_pool.h"
#include "gpufeed/file.h"
#include "sources/hdf5/read/dataset_reader.h"

namespace gpufeed {

class ChunkPrefetcher {
 public:
  static constexpr int kMinThreads = 8;
  static constexpr int kMaxThreads = 64;

  // `reads_in_flight`: the most File::ReadsInFlight of the files it fetches from, kept within
  // [1, kMaxThreads]. Its threads start at the first Submit.
  explicit ChunkPrefetcher(int reads_in_flight);
  // Waits for the fetches in flight.
  ~ChunkPrefetcher() = default;

  // How many samples beyond the batches in flight the hints should reach: reads_in_flight
  // chunks of `block` samples, within a quarter of `cache_capacity` bytes at
  // `bytes_per_sample` (saturating; 0 bytes counts as 1).
  int64_t ReachSamples(int64_t block, uint64_t bytes_per_sample, uint64_t cache_capacity) const;

  // Bytes claimed ahead and not yet arrived.
  uint64_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }

  // Reads `ahead`'s ranges of `file` on a prefetch thread, adds their bytes to `*bytes_read`
  // and finishes every claim; on a failure abandons them (each batch then reads what it needs
  // itself, its error naming its sample). Its bytes count as outstanding until then.
  // `bytes_read` must outlive this. Throws what starting a thread or queueing throws (the
  // claims are then abandoned as `ahead` is dropped).
  void Submit(std::shared_ptr<const File> file, std::shared_ptr<Hdf5ReadAhead> ahead,
              std::atomic<int64_t>* bytes_read);

 private:
  void Fetch(const File& file, Hdf5ReadAhead& ahead, std::atomic<int64_t>* bytes_read);

  const int reads_in_flight_;
  std::atomic<uint64_t> outstanding_{0};
  std::once_flag pool_once_;
  // Last: destroyed first, its threads finishing their fetches while the rest still lives.
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace gpufeed
