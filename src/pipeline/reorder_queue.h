// ReorderQueue: hands run sequence numbers to workers within a window and gives their results
// back to the consumer in sequence order, whatever order the workers finish in.
//
// A worker Claim()s the next number while it is inside the window: claimed numbers stay
// fewer than `workers + prefetch` ahead of the next one to deliver, and a worker whose index
// is past the active count parks until SetWindow lets it in. It Put()s its result under that
// number; Pop() waits for the next number's result. Fail() keeps the first error and wakes
// everyone: workers stop claiming, and Pop() (now and later) rethrows it. Close() stops the
// workers the same way without an error. Reset() starts a new run at number 0.
//
// Thread-safety: thread-safe. Claim and Put are called by the workers, Pop by one consumer
// thread at a time, Fail, Close, SetWindow and the getters from any thread. halted() takes no
// lock, so a worker waiting under another lock (a buffer pool's) can poll it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <utility>

#include "core/thread_annotations.h"

namespace gpufeed {

template <typename T>
class ReorderQueue {
 public:
  ReorderQueue(int workers, int prefetch) : workers_(workers), prefetch_(prefetch) {}
  ReorderQueue(const ReorderQueue&) = delete;
  ReorderQueue& operator=(const ReorderQueue&) = delete;

  // Waits until worker `worker` may claim a number; nullopt once the queue is closed or
  // failed.
  std::optional<int64_t> Claim(int worker) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (!closed_ && !error_ && !(worker < workers_ && InWindow())) work_cv_.Wait(&mu_);
    if (closed_ || error_) return std::nullopt;
    return next_claim_++;
  }

  // The result for number `seq`. Dropped (destroyed here) once the queue is closed.
  void Put(int64_t seq, T item) EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (closed_) return;  // `item` dies with this frame, after the lock
      ready_.emplace(seq, std::move(item));
    }
    ready_cv_.NotifyAll();
  }

  // Waits for the next number's result and returns it; rethrows the error of Fail().
  T Pop() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (!error_ && ready_.count(next_deliver_) == 0) ready_cv_.Wait(&mu_);
    if (error_) std::rethrow_exception(error_);
    auto node = ready_.extract(next_deliver_);
    ++next_deliver_;
    work_cv_.NotifyAll();  // the window moved on
    return std::move(node.mapped());
  }

  // Rethrows the error of Fail(), if any.
  void RethrowIfFailed() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (error_) std::rethrow_exception(error_);
  }
  bool failed() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return error_ != nullptr;
  }

  // Keeps `error` unless an error came first or the queue was closed; wakes everyone.
  void Fail(std::exception_ptr error) EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (!error_ && !closed_) error_ = std::move(error);
      halted_ = true;
    }
    WakeAll();
  }

  // Stops the workers: Claim returns nullopt and Put drops its item. Wakes everyone.
  void Close() EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      closed_ = true;
      halted_ = true;
    }
    WakeAll();
  }

  // Drops every undelivered result. The items die outside the lock.
  void Clear() EXCLUDES(mu_) {
    std::map<int64_t, T> dropped;
    MutexLock lock(&mu_);
    dropped.swap(ready_);
  }

  // Opens a new run at number 0: not closed, no error, nothing ready.
  // REQUIRES: no worker is inside Claim or Put.
  void Reset() EXCLUDES(mu_) {
    std::map<int64_t, T> dropped;
    MutexLock lock(&mu_);
    closed_ = false;
    halted_ = false;
    error_ = nullptr;
    next_claim_ = 0;
    next_deliver_ = 0;
    dropped.swap(ready_);
  }

  void SetWindow(int workers, int prefetch) EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      workers_ = workers;
      prefetch_ = prefetch;
    }
    work_cv_.NotifyAll();
  }
  int workers() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return workers_;
  }
  int prefetch() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return prefetch_;
  }
  // Built items waiting for delivery.
  int ready() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return static_cast<int>(ready_.size());
  }

  // Closed or failed. Lock-free.
  bool halted() const { return halted_.load(); }

 private:
  bool InWindow() const REQUIRES(mu_) { return next_claim_ < next_deliver_ + workers_ + prefetch_; }

  void WakeAll() {
    work_cv_.NotifyAll();
    ready_cv_.NotifyAll();
  }

  mutable Mutex mu_;
  CondVar work_cv_;   // workers: the window moved, or closed/failed
  CondVar ready_cv_;  // consumer: a result is ready, or failed
  bool closed_ GUARDED_BY(mu_) = false;
  std::exception_ptr error_ GUARDED_BY(mu_);
  std::atomic<bool> halted_{false};  // closed_ || error_, for lock-free reads
  int workers_ GUARDED_BY(mu_);
  int prefetch_ GUARDED_BY(mu_);
  int64_t next_claim_ GUARDED_BY(mu_) = 0;
  int64_t next_deliver_ GUARDED_BY(mu_) = 0;
  std::map<int64_t, T> ready_ GUARDED_BY(mu_);
};

}  // namespace gpufeed
