// A worker's decoded chunks, least recently used evicted first, bounded by bytes.
//
// Chunks used by the current batch are never evicted for another chunk of the same batch: a
// batch reads its chunks in file order and needs each once, so under a full shuffle (every
// batch touching every chunk) plain LRU would evict each chunk just before the next batch
// asks for it and never hit. Keeping the first ones instead serves the next batch a
// capacity's worth of hits; under block shuffle the older batches' chunks go first, as LRU.
//
// The caches of one source's workers share one budget (ChunkCacheBudget): each of the n
// caches alive keeps at most budget / n bytes, so more workers do not mean more memory.
//
// Thread-safety: one thread at a time (it lives in a worker's SourceWorkerState);
// ChunkCacheBudget is thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace gpufeed {

// The decoded-chunk memory one source's workers share: `total` bytes split evenly between
// the caches alive.
class ChunkCacheBudget {
 public:
  explicit ChunkCacheBudget(size_t total) : total_(total) {}
  size_t total() const { return total_; }
  // What one cache may keep now.
  size_t share() const { return total_ / static_cast<size_t>(std::max(1, caches_.load())); }
  void Join() { caches_.fetch_add(1); }
  void Leave() { caches_.fetch_sub(1); }

 private:
  const size_t total_;
  std::atomic<int> caches_{0};
};

class DecodedChunkCache {
 public:
  using Buffer = std::shared_ptr<const std::vector<std::byte>>;

  // A cache with a budget of its own.
  explicit DecodedChunkCache(size_t capacity_bytes)
      : DecodedChunkCache(std::make_shared<ChunkCacheBudget>(capacity_bytes)) {}
  // A cache sharing `budget` with the other caches made with it.
  explicit DecodedChunkCache(std::shared_ptr<ChunkCacheBudget> budget)
      : budget_(std::move(budget)) {
    budget_->Join();
  }
  ~DecodedChunkCache() { budget_->Leave(); }
  DecodedChunkCache(const DecodedChunkCache&) = delete;
  DecodedChunkCache& operator=(const DecodedChunkCache&) = delete;

  // Starts a batch: chunks used from now on are kept over chunks used before.
  void BeginBatch() { ++generation_; }
  // The chunk `key` names (the caller packs file, dataset and chunk into it), or null.
  Buffer Find(uint64_t key);
  // Keeps `chunk`, evicting the least recently used ones to fit, but none used in this
  // batch: then `chunk` is not kept. A chunk larger than the capacity is not kept either.
  // REQUIRES: `key` is not cached.
  void Insert(uint64_t key, Buffer chunk);
  // Whether a chunk of `bytes` would be kept.
  bool Fits(size_t bytes) const { return bytes <= capacity(); }
  // This cache's share of the budget now.
  size_t capacity() const { return budget_->share(); }
  // A buffer of `bytes` to decode into: an evicted one nobody holds any more when there is
  // one (saves allocating and faulting in megabytes per decode), else a new one.
  std::shared_ptr<std::vector<std::byte>> NewBuffer(size_t bytes);

  size_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    uint64_t key;
    Buffer chunk;
    uint64_t generation;  // the batch that used it last
  };
  const std::shared_ptr<ChunkCacheBudget> budget_;
  size_t bytes_ = 0;
  uint64_t generation_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  std::vector<std::shared_ptr<std::vector<std::byte>>> spare_;  // evicted, unshared
};

}  // namespace gpufeed
