#include "device/buffer_pool.h"

#include <algorithm>

#include "gpufeed/error.h"

namespace gpufeed {

BufferPool::Handle& BufferPool::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    data_ = other.data_;
    other.data_ = nullptr;
  }
  return *this;
}

void BufferPool::Handle::Reset() noexcept { ReleaseAfter(nullptr); }

void BufferPool::Handle::ReleaseAfter(std::shared_ptr<Fence> fence) noexcept {
  if (data_ != nullptr) pool_->Return(data_, std::move(fence));
  data_ = nullptr;
  pool_.reset();
}

std::shared_ptr<BufferPool> BufferPool::Create(std::string name, size_t buffer_bytes, int capacity,
                                               AllocFn alloc, FreeFn free) {
  GPUFEED_ASSERT(buffer_bytes > 0 && capacity > 0, "empty buffer pool");
  return std::shared_ptr<BufferPool>(
      new BufferPool(std::move(name), buffer_bytes, capacity, std::move(alloc), std::move(free)));
}

BufferPool::BufferPool(std::string name, size_t buffer_bytes, int capacity, AllocFn alloc,
                       FreeFn free)
    : name_(std::move(name)),
      buffer_bytes_(buffer_bytes),
      alloc_(std::move(alloc)),
      free_fn_(std::move(free)),
      capacity_(capacity) {}

BufferPool::~BufferPool() {
  // Handles keep the pool alive, so only pending fences can still reference a buffer here.
  for (auto& p : pending_) {
    try {
      if (p.fence) p.fence->Wait();
    } catch (...) {
      // The copy failed; the buffer is still ours to free.
    }
  }
  for (std::byte* data : all_) free_fn_(data);
}

int BufferPool::allocated() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(all_.size());
}

int BufferPool::capacity() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

void BufferPool::Grow(int more) {
  GPUFEED_ASSERT(more >= 0, "a pool only grows");
  std::lock_guard lock(mu_);
  capacity_ += more;
  cv_.notify_all();
}

int BufferPool::in_use() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(all_.size() - free_.size());
}

void BufferPool::Return(std::byte* data, std::shared_ptr<Fence> fence) noexcept {
  std::lock_guard lock(mu_);
  if (fence && !fence->IsDone()) {
    pending_.push_back({data, std::move(fence)});
  } else {
    free_.push_back(data);
  }
  cv_.notify_one();
}

void BufferPool::ReclaimDoneLocked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->fence->IsDone()) {
      free_.push_back(it->data);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

BufferPool::Handle BufferPool::Acquire(const std::function<bool()>& should_stop) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (should_stop()) return {};
    ReclaimDoneLocked();
    if (!free_.empty()) {
      std::byte* data = free_.back();
      free_.pop_back();
      return Handle(shared_from_this(), data);
    }
    if (static_cast<int>(all_.size()) + allocating_ < capacity_) {
      // Allocate outside the lock: pinned allocations can take milliseconds.
      ++allocating_;
      lock.unlock();
      std::byte* data = nullptr;
      try {
        data = static_cast<std::byte*>(alloc_(buffer_bytes_));
      } catch (...) {
        lock.lock();
        --allocating_;
        throw;
      }
      lock.lock();
      --allocating_;
      all_.push_back(data);
      return Handle(shared_from_this(), data);
    }
    if (!pending_.empty()) {
      // Every buffer is taken and the oldest waits on a copy: wait for that copy.
      std::shared_ptr<Fence> fence = pending_.front().fence;
      lock.unlock();
      fence->Wait();
      lock.lock();
      continue;
    }
    cv_.wait(lock);
  }
}

void BufferPool::Reserve(int count) {
  std::lock_guard lock(mu_);
  count = std::min(count, capacity_);
  while (static_cast<int>(all_.size()) + allocating_ < count) {
    auto* data = static_cast<std::byte*>(alloc_(buffer_bytes_));
    all_.push_back(data);
    free_.push_back(data);
  }
}

void BufferPool::WakeAll() {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

}  // namespace gpufeed
