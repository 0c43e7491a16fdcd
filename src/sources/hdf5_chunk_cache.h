// A worker's decoded chunks, least recently used evicted first, bounded by bytes.
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

  // The chunk `key` names (the caller packs file, dataset and chunk into it), or null.
  Buffer Find(uint64_t key);
  // Keeps `chunk`, evicting the least recently used ones to fit. A chunk larger than the
  // capacity is not kept. REQUIRES: `key` is not cached.
  void Insert(uint64_t key, Buffer chunk);
  // Whether a chunk of `bytes` would be kept.
  bool Fits(size_t bytes) const { return bytes <= capacity_; }
  // A buffer of `bytes` to decode into: an evicted one nobody holds any more when there is
  // one (saves allocating and faulting in megabytes per decode), else a new one.
  std::shared_ptr<std::vector<std::byte>> NewBuffer(size_t bytes);

  size_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }

 private:
  using Entry = std::pair<uint64_t, Buffer>;
  const size_t capacity_;
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  std::vector<std::shared_ptr<std::vector<std::byte>>> spare_;  // evicted, unshared
};

}  // namespace gpufeed
