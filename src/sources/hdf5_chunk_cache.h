// A worker's decoded chunks, least recently used evicted first, bounded by bytes.
//
// Chunks used by the current batch are never evicted for another chunk of the same batch: a
// batch reads its chunks in file order and needs each once, so under a full shuffle (every
// batch touching every chunk) plain LRU would evict each chunk just before the next batch
// asks for it and never hit. Keeping the first ones instead serves the next batch a
// capacity's worth of hits; under block shuffle the older batches' chunks go first, as LRU.
//
// Thread-safety: one thread at a time (it lives in a worker's SourceWorkerState).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace gpufeed {

class DecodedChunkCache {
 public:
  using Buffer = std::shared_ptr<const std::vector<std::byte>>;

  explicit DecodedChunkCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Starts a batch: chunks used from now on are kept over chunks used before.
  void BeginBatch() { ++generation_; }
  // The chunk `key` names (the caller packs file, dataset and chunk into it), or null.
  Buffer Find(uint64_t key);
  // Keeps `chunk`, evicting the least recently used ones to fit, but none used in this
  // batch: then `chunk` is not kept. A chunk larger than the capacity is not kept either.
  // REQUIRES: `key` is not cached.
  void Insert(uint64_t key, Buffer chunk);
  // Whether a chunk of `bytes` would be kept.
  bool Fits(size_t bytes) const { return bytes <= capacity_; }
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
  const size_t capacity_;
  size_t bytes_ = 0;
  uint64_t generation_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  std::vector<std::shared_ptr<std::vector<std::byte>>> spare_;  // evicted, unshared
};

}  // namespace gpufeed
