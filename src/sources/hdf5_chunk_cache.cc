#include "sources/hdf5_chunk_cache.h"

#include "gpufeed/error.h"

namespace gpufeed {

DecodedChunkCache::Buffer DecodedChunkCache::Find(uint64_t key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void DecodedChunkCache::Insert(uint64_t key, Buffer chunk) {
  GPUFEED_ASSERT(index_.find(key) == index_.end(), "chunk inserted twice");
  const size_t n = chunk->size();
  if (n > capacity_) return;
  while (bytes_ + n > capacity_ && !lru_.empty()) {
    bytes_ -= lru_.back().second->size();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, std::move(chunk));
  index_[key] = lru_.begin();
  bytes_ += n;
}

}  // namespace gpufeed
