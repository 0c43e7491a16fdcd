// Decoded chunks of one source, shared by its workers: least recently used evicted first,
// bounded by bytes.
//
// One cache for all workers, not one per worker: batches go to whichever worker is free, so
// per-worker caches each held a share of the budget and decoded the same chunks again (on a
// 100,000-sample set whose decoded size fit the budget exactly, 26 % of the chunk uses hit
// over 10 block-shuffled epochs; with one shared cache every epoch after the first hits).
//
// Chunks used by a batch in flight are never evicted for another chunk: a batch reads its
// chunks in file order and needs each once, so under a full shuffle (every batch touching
// every chunk) plain LRU would evict each chunk just before the next batch asks for it and
// never hit. Keeping those instead serves the next batches a capacity's worth of hits; under
// block shuffle older batches' chunks go first, as LRU.
//
// Decode buffers are recycled: a buffer comes back to a small spare list when its last holder
// (the cache or a batch reading it) drops it, under a mutex, so a later decode writes into
// memory already faulted in (first touch of fresh memory is slow on VMs) and never into
// memory another thread still reads.
//
// A chunk being fetched is fetched once: the worker that finds it neither held nor in flight
// claims its fetch (a ChunkFetch), and the others wanting it meanwhile wait for that fetch
// instead of sending the same request again (under block shuffle two workers start batches of
// one window at once, and each fetched the window's chunks: half again as many requests as
// chunks). A worker waits only once it holds no unfinished claim of its own (the HDF5 reader
// finishes its fetches before it waits), so no two workers ever wait on each other.
//
// Thread-safety: SharedChunkCache is thread-safe. A DecodedChunkCache (a worker's view) is
// used by one thread at a time (it lives in a worker's SourceWorkerState), and so is a
// ChunkFetch (its owner's).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gpufeed {

// Memory for decoded chunks: blocks of 2 MB and more are 2 MB-aligned and advised for huge
// pages, so their first touch faults once per 2 MB instead of once per 4 KB (on a VM each
// fault is a trap to the hypervisor: with 4 KB pages, filling the cache with a decoded
// 820 MB set took longer than decoding it). Smaller blocks come from operator new.
void* AllocateChunkMemory(size_t bytes);
void FreeChunkMemory(void* p, size_t bytes) noexcept;

template <class T>
struct ChunkAllocator {
  using value_type = T;
  ChunkAllocator() = default;
  template <class U>
  ChunkAllocator(const ChunkAllocator<U>&) noexcept {}  // NOLINT: allocator rebinding
  T* allocate(size_t n) { return static_cast<T*>(AllocateChunkMemory(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { FreeChunkMemory(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const ChunkAllocator<U>&) const noexcept {
    return true;
  }
};
using ChunkBytes = std::vector<std::byte, ChunkAllocator<std::byte>>;

class SharedChunkCache;

// The one fetch in flight of a chunk, claimed by DecodedChunkCache::Lookup. Finish hands the
// chunk to the workers waiting for it and keeps it in the cache (as Insert); dropped or
// abandoned unfinished (a failed read), it hands them null, and each reads what it needs
// itself (its error then names its own sample). Move-only.
class ChunkFetch {
 public:
  using Buffer = std::shared_ptr<const ChunkBytes>;

  ChunkFetch() = default;
  ChunkFetch(ChunkFetch&& other) noexcept = default;
  ChunkFetch& operator=(ChunkFetch&& other) noexcept;
  ~ChunkFetch() { Abandon(); }

  // Whether this is a claim not yet finished or abandoned.
  explicit operator bool() const { return cache_ != nullptr; }
  // REQUIRES: *this.
  void Finish(Buffer chunk);
  void Abandon() noexcept;

 private:
  friend class SharedChunkCache;
  std::shared_ptr<SharedChunkCache> cache_;
  int view_ = 0;
  uint64_t key_ = 0;
  std::promise<Buffer> promise_;
};

// What DecodedChunkCache::Lookup found: the chunk held, a fetch of it in flight (its result:
// null when that fetch failed), a fetch claimed by the caller, or nothing (none set).
struct ChunkLookup {
  std::shared_ptr<const ChunkBytes> held;
  std::shared_future<std::shared_ptr<const ChunkBytes>> pending;
  ChunkFetch fetch;
};

class SharedChunkCache : public std::enable_shared_from_this<SharedChunkCache> {
 public:
  using Buffer = std::shared_ptr<const ChunkBytes>;

  explicit SharedChunkCache(size_t capacity_bytes);
  SharedChunkCache(const SharedChunkCache&) = delete;
  SharedChunkCache& operator=(const SharedChunkCache&) = delete;

  size_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  // Raises the capacity to `bytes` (never lowers it) while the workers use the cache.
  void Grow(size_t bytes);
  size_t bytes() const;
  size_t size() const;
  // Lookups that found their chunk being fetched by another worker, and waited for it.
  int64_t fetch_waits() const;

 private:
  friend class DecodedChunkCache;
  friend class ChunkFetch;
  struct Entry {
    uint64_t key;
    Buffer chunk;
    int view;        // the view that used it last
    uint64_t batch;  // that view's batch then (0: none)
  };
  struct Spares;

  int Join();
  void Leave(int view);
  void BeginBatch(int view);
  void EndBatch(int view);
  Buffer Find(int view, uint64_t key);
  void Insert(int view, uint64_t key, Buffer chunk);
  ChunkLookup Lookup(int view, uint64_t key, bool claim);
  ChunkFetch Claim(int view, uint64_t key);
  // A claim of `key` for `view`. REQUIRES: mu_ held, `key` neither held nor pending.
  ChunkFetch ClaimLocked(int view, uint64_t key);
  // Ends a claimed fetch: `chunk` kept (as Insert), or none (null). The chunk is held, or no
  // longer pending, in one step, so that no lookup finds neither and fetches it again.
  void EndFetch(int view, uint64_t key, Buffer chunk);
  // Insert's work. REQUIRES: mu_ held. Evicted chunks go to `evicted`, freed after the lock.
  void InsertLocked(int view, uint64_t key, Buffer chunk, std::vector<Buffer>& evicted);
  std::shared_ptr<ChunkBytes> NewBuffer(size_t bytes);
  // Marks `e` used now by `view`'s batch. REQUIRES: mu_ held.
  void TouchLocked(Entry& e, int view);
  // Whether the batch that used `e` last is still in flight. REQUIRES: mu_ held.
  bool InFlightLocked(const Entry& e) const;

  std::atomic<size_t> capacity_;
  const std::shared_ptr<Spares> spares_;  // outlives the cache while buffers are out
  mutable std::mutex mu_;
  uint64_t batches_begun_ = 0;
  int next_view_ = 0;
  std::unordered_map<int, uint64_t> batches_;  // view -> its batch in flight (numbered 1, 2..)
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  std::unordered_map<uint64_t, std::shared_future<Buffer>> pending_;  // fetches in flight
  int64_t fetch_waits_ = 0;
};

// A worker's view of a SharedChunkCache.
class DecodedChunkCache {
 public:
  using Buffer = SharedChunkCache::Buffer;

  // A cache of its own.
  explicit DecodedChunkCache(size_t capacity_bytes)
      : DecodedChunkCache(std::make_shared<SharedChunkCache>(capacity_bytes)) {}
  // A view of `shared`, which the other workers' views share.
  explicit DecodedChunkCache(std::shared_ptr<SharedChunkCache> shared)
      : shared_(std::move(shared)), view_(shared_->Join()) {}
  ~DecodedChunkCache() { shared_->Leave(view_); }
  DecodedChunkCache(const DecodedChunkCache&) = delete;
  DecodedChunkCache& operator=(const DecodedChunkCache&) = delete;

  // Starts a batch (and ends this view's previous one): chunks used from now on are not
  // evicted while it runs.
  void BeginBatch() { shared_->BeginBatch(view_); }
  // Ends this view's batch: its chunks may be evicted again.
  void EndBatch() { shared_->EndBatch(view_); }
  // The chunk `key` names (the caller packs file, dataset and chunk into it), or null.
  Buffer Find(uint64_t key) { return shared_->Find(view_, key); }
  // Keeps `chunk`, evicting the least recently used ones to fit, but none a batch in flight
  // used last (it looks at the least recent few: when those are all in use, `chunk` is not
  // kept). A chunk larger than the capacity is not kept either. When another worker kept the
  // same key meanwhile, its copy stays.
  void Insert(uint64_t key, Buffer chunk) { shared_->Insert(view_, key, std::move(chunk)); }
  // The chunk `key` names when held (marked used, as Find); else the fetch of it another
  // worker has in flight; else, when `claim`, the fetch claimed for the caller, who reads the
  // chunk and then finishes or abandons the claim. The caller waits for a pending fetch only
  // once it holds no unfinished claim (see above).
  ChunkLookup Lookup(uint64_t key, bool claim) { return shared_->Lookup(view_, key, claim); }
  // The fetch of `key` claimed for the caller when the chunk is neither held nor being
  // fetched; else none (a read ahead passes such a chunk by).
  ChunkFetch Claim(uint64_t key) { return shared_->Claim(view_, key); }
  // Whether a chunk of `bytes` would be kept.
  bool Fits(size_t bytes) const { return bytes <= capacity(); }
  size_t capacity() const { return shared_->capacity(); }
  // A buffer of `bytes` to decode into: a recycled one nobody holds any more when there is
  // one, else a new one.
  std::shared_ptr<ChunkBytes> NewBuffer(size_t bytes) { return shared_->NewBuffer(bytes); }

  size_t bytes() const { return shared_->bytes(); }
  size_t size() const { return shared_->size(); }

 private:
  const std::shared_ptr<SharedChunkCache> shared_;
  const int view_;
};

}  // namespace gpufeed
