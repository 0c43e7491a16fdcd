// BufferPool: a bounded number of equal-sized buffers, allocated lazily (at most `capacity`,
// which Grow may raise; never freed before the pool dies), handed out as move-only Handles that
// give their buffer back when dropped. A handle released with ReleaseAfter(fence) comes back only
// once the fence is done: a pinned buffer is not reused while a copy still reads it.
//
// The pool is owned by shared_ptr and every Handle keeps it alive, so a batch the consumer
// keeps (a torch tensor) stays valid after its loader is gone.
// Thread-safety: thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpufeed/device.h"

namespace gpufeed {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  using AllocFn = std::function<void*(size_t bytes)>;
  using FreeFn = std::function<void(void*)>;

  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& other) noexcept { *this = std::move(other); }
    Handle& operator=(Handle&& other) noexcept;
    ~Handle() { Reset(); }

    std::byte* data() const { return data_; }
    size_t size() const { return pool_ ? pool_->buffer_bytes_ : 0; }
    explicit operator bool() const { return data_ != nullptr; }
    // Gives the buffer back now.
    void Reset() noexcept;
    // Gives the buffer back once `fence` is done (a copy reading it has completed).
    void ReleaseAfter(std::shared_ptr<Fence> fence) noexcept;

   private:
    friend class BufferPool;
    Handle(std::shared_ptr<BufferPool> pool, std::byte* data)
        : pool_(std::move(pool)), data_(data) {}
    std::shared_ptr<BufferPool> pool_;
    std::byte* data_ = nullptr;
  };

  // REQUIRES: buffer_bytes > 0, capacity > 0. `alloc` may throw (Error kDevice for OOM).
  static std::shared_ptr<BufferPool> Create(std::string name, size_t buffer_bytes, int capacity,
                                            AllocFn alloc, FreeFn free);
  ~BufferPool();

  // Blocks until a buffer is free. Returns an empty Handle when `should_stop()` turns true;
  // whoever sets what should_stop reads must then call WakeAll(). Fence failures throw.
  Handle Acquire(const std::function<bool()>& should_stop);
  void WakeAll();
  // Raises the capacity by `more` buffers (allocated lazily, like the rest) and wakes the
  // threads waiting in Acquire. REQUIRES: more >= 0.
  void Grow(int more);
  // Allocates buffers now until `count` exist (at most capacity), so the working set's
  // allocation and first-touch page faults happen before the first batch, and running out
  // of memory is reported up front. Throws what `alloc` throws; buffers made stay pooled.
  void Reserve(int count);

  const std::string& name() const { return name_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  int capacity() const;
  // Buffers allocated so far (reserved up front, then lazily up to capacity).
  int allocated() const;
  // Buffers held by handles or waiting on a fence.
  int in_use() const;

 private:
  struct Pending {
    std::byte* data;
    std::shared_ptr<Fence> fence;
  };

  BufferPool(std::string name, size_t buffer_bytes, int capacity, AllocFn alloc, FreeFn free);
  void Return(std::byte* data, std::shared_ptr<Fence> fence) noexcept;
  // Moves pending buffers whose fence is done to free_. REQUIRES: mu_ held.
  void ReclaimDoneLocked();

  const std::string name_;
  const size_t buffer_bytes_;
  AllocFn alloc_;
  FreeFn free_fn_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::byte*> all_;
  std::vector<std::byte*> free_;  // LIFO: the warmest buffer is reused first
  std::deque<Pending> pending_;   // oldest first
  int allocating_ = 0;
  int capacity_;  // guarded by mu_
};

}  // namespace gpufeed
