#include "sources/hdf5/read/chunk_cache.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <utility>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// Buffers kept for reuse beyond those the cache holds: enough for the decodes in flight of a
// few workers (a decode whose chunk is evicted or not kept gives its buffer back here).
constexpr size_t kMaxSpares = 4;
constexpr size_t kHugePage = size_t{2} << 20;
// Chunks, least recently used first, that Insert looks at for one it may evict.
constexpr int kEvictionLook = 64;

}  // namespace

// Buffers whose last holder let go. Its own mutex: a buffer may come back while the cache's
// mutex is held (an eviction dropping the last reference).
struct SharedChunkCache::Spares {
  std::mutex mu;
  std::vector<std::unique_ptr<ChunkBytes>> free;
};

void* AllocateChunkMemory(size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Advice only: where transparent huge pages are off, the block is plain memory.
  madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void FreeChunkMemory(void* p, size_t bytes) noexcept {
  if (bytes < kHugePage) {
    ::operator delete(p);
  } else {
    std::free(p);
  }
}

SharedChunkCache::SharedChunkCache(size_t capacity_bytes)
    : capacity_(capacity_bytes), spares_(std::make_shared<Spares>()) {}

void SharedChunkCache::Grow(size_t bytes) {
  size_t now = capacity_.load(std::memory_order_relaxed);
  while (now < bytes && !capacity_.compare_exchange_weak(now, bytes, std::memory_order_relaxed)) {
  }
}

size_t SharedChunkCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t SharedChunkCache::size() const {
  std::lock_guard lock(mu_);
  return index_.size();
}

int SharedChunkCache::Join() {
  std::lock_guard lock(mu_);
  return next_view_++;
}

void SharedChunkCache::Leave(int view) {
  std::lock_guard lock(mu_);
  batches_.erase(view);
}

void SharedChunkCache::BeginBatch(int view) {
  std::lock_guard lock(mu_);
  batches_[view] = ++batches_begun_;
}

void SharedChunkCache::EndBatch(int view) {
  std::lock_guard lock(mu_);
  batches_.erase(view);
}

void SharedChunkCache::TouchLocked(Entry& e, int view) {
  const auto it = batches_.find(view);
  e.view = view;
  e.batch = it == batches_.end() ? 0 : it->second;
}

bool SharedChunkCache::InFlightLocked(const Entry& e) const {
  if (e.batch == 0) return false;
  const auto it = batches_.find(e.view);
  return it != batches_.end() && it->second == e.batch;
}

SharedChunkCache::Buffer SharedChunkCache::Find(int view, uint64_t key) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  TouchLocked(*it->second, view);
  return it->second->chunk;
}

void SharedChunkCache::Insert(int view, uint64_t key, Buffer chunk) {
  std::vector<Buffer> evicted;  // dropped after the lock: freeing may unmap megabytes
  std::lock_guard lock(mu_);
  InsertLocked(view, key, std::move(chunk), evicted);
}

void SharedChunkCache::InsertLocked(int view, uint64_t key, Buffer chunk,
                                    std::vector<Buffer>& evicted) {
  const auto found = index_.find(key);
  if (found != index_.end()) {  // another worker decoded it meanwhile: keep that copy
    lru_.splice(lru_.begin(), lru_, found->second);
    TouchLocked(*found->second, view);
    return;
  }
  const size_t n = chunk->size();
  const size_t capacity = capacity_.load(std::memory_order_relaxed);
  if (n > capacity) return;
  while (bytes_ + n > capacity && !lru_.empty()) {
    // The least recently used chunk no batch in flight uses, among the last few (a bounded
    // look: under a full shuffle nearly all are in use, and a cache may hold many chunks).
    auto victim = lru_.end();
    int looked = 0;
    for (auto it = lru_.end(); it != lru_.begin() && looked < kEvictionLook; ++looked) {
      --it;
      if (!InFlightLocked(*it)) {
        victim = it;
        break;
      }
    }
    if (victim == lru_.end()) return;  // all in use: `chunk` is not kept
    bytes_ -= victim->chunk->size();
    evicted.push_back(std::move(victim->chunk));
    index_.erase(victim->key);
    lru_.erase(victim);
  }
  lru_.push_front({key, std::move(chunk), view, 0});
  TouchLocked(lru_.front(), view);
  index_[key] = lru_.begin();
  bytes_ += n;
}

int64_t SharedChunkCache::fetch_waits() const {
  std::lock_guard lock(mu_);
  return fetch_waits_;
}

ChunkLookup SharedChunkCache::Lookup(int view, uint64_t key, bool claim) {
  ChunkLookup found;
  std::lock_guard lock(mu_);
  if (const auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    TouchLocked(*it->second, view);
    found.held = it->second->chunk;
    return found;
  }
  if (const auto it = pending_.find(key); it != pending_.end()) {
    ++fetch_waits_;
    found.pending = it->second;
    return found;
  }
  if (claim) found.fetch = ClaimLocked(view, key);
  return found;
}

ChunkFetch SharedChunkCache::Claim(int view, uint64_t key) {
  std::lock_guard lock(mu_);
  if (index_.count(key) != 0 || pending_.count(key) != 0) return {};
  return ClaimLocked(view, key);
}

ChunkFetch SharedChunkCache::ClaimLocked(int view, uint64_t key) {
  ChunkFetch fetch;
  fetch.cache_ = shared_from_this();
  fetch.view_ = view;
  fetch.key_ = key;
  pending_.emplace(key, fetch.promise_.get_future().share());
  return fetch;
}

void SharedChunkCache::EndFetch(int view, uint64_t key, Buffer chunk) {
  std::vector<Buffer> evicted;  // dropped after the lock
  std::lock_guard lock(mu_);
  pending_.erase(key);
  if (chunk != nullptr) InsertLocked(view, key, std::move(chunk), evicted);
}

ChunkFetch& ChunkFetch::operator=(ChunkFetch&& other) noexcept {
  if (this != &other) {
    Abandon();
    cache_ = std::move(other.cache_);
    view_ = other.view_;
    key_ = other.key_;
    promise_ = std::move(other.promise_);
  }
  return *this;
}

void ChunkFetch::Finish(Buffer chunk) {
  const auto cache = std::move(cache_);
  cache->EndFetch(view_, key_, chunk);
  // After EndFetch: a waiter woken now finds the chunk held or gone, never still pending.
  promise_.set_value(std::move(chunk));
}

void ChunkFetch::Abandon() noexcept {
  if (cache_ == nullptr) return;
  const auto cache = std::move(cache_);
  try {
    cache->EndFetch(view_, key_, nullptr);
    promise_.set_value(nullptr);
  } catch (...) {
    // std::mutex::lock failing: the waiters then see a broken promise, which reads as null.
  }
}

std::shared_ptr<ChunkBytes> SharedChunkCache::NewBuffer(size_t bytes) {
  std::unique_ptr<ChunkBytes> buffer;
  {
    std::lock_guard lock(spares_->mu);
    auto& free = spares_->free;
    for (size_t i = 0; i < free.size(); ++i) {
      if (free[i]->size() == bytes) {
        buffer = std::move(free[i]);
        free.erase(free.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  if (!buffer) buffer = std::make_unique<ChunkBytes>(bytes);
  // The last holder gives it back (or frees it when enough are spare). Taking the spares'
  // mutex there orders every read of the buffer before the next decode into it.
  return std::shared_ptr<ChunkBytes>(buffer.release(), [spares = spares_](ChunkBytes* p) {
    std::unique_ptr<ChunkBytes> own(p);
    {
      std::lock_guard lock(spares->mu);
      if (spares->free.size() < kMaxSpares) {
        spares->free.push_back(std::move(own));
        return;
      }
    }
    // Enough spares: `own` frees it here, outside the lock.
  });
}

}  // namespace gpufeed
