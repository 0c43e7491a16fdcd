#include "sources/hdf5_chunk_cache.h"

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr size_t kMaxSpares = 2;

}  // namespace

std::shared_ptr<std::vector<std::byte>> DecodedChunkCache::NewBuffer(size_t bytes) {
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i]->size() == bytes) {
      auto out = std::move(spare_[i]);
      spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
      return out;
    }
  }
  return std::make_shared<std::vector<std::byte>>(bytes);
}

DecodedChunkCache::Buffer DecodedChunkCache::Find(uint64_t key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  it->second->generation = generation_;
  return it->second->chunk;
}

void DecodedChunkCache::Insert(uint64_t key, Buffer chunk) {
  GPUFEED_ASSERT(index_.find(key) == index_.end(), "chunk inserted twice");
  const size_t n = chunk->size();
  const size_t capacity = this->capacity();
  if (n > capacity) return;
  while (bytes_ + n > capacity && !lru_.empty()) {
    if (lru_.back().generation == generation_) return;  // all used by this batch: keep them
    Buffer& victim = lru_.back().chunk;
    bytes_ -= victim->size();
    if (victim.use_count() == 1 && spare_.size() < kMaxSpares) {
      // Only this cache held it, so nobody reads it: safe to write into again.
      spare_.push_back(std::const_pointer_cast<std::vector<std::byte>>(std::move(victim)));
    }
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front({key, std::move(chunk), generation_});
  index_[key] = lru_.begin();
  bytes_ += n;
}

}  // namespace gpufeed
