// ThreadPool: the one pool of worker threads. A fixed number of threads run submitted tasks
// in FIFO order; each task learns the index of the thread running it, so callers can keep
// per-thread state (a source's SourceWorkerState) without locks.
// Thread-safety: Submit and ParallelFor may be called from any thread, but not from inside
// a task of the same pool (that could deadlock a full pool). The destructor finishes the
// queued tasks and joins every thread.
#pragma once

#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "core/bounded_queue.h"

namespace gpufeed {

class ThreadPool {
 public:
  using Task = std::function<void(int thread_index)>;

  // REQUIRES: threads > 0.
  explicit ThreadPool(int threads, size_t queue_capacity = 1024);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }

  // Queues `task`; the future carries its exception, if any.
  std::future<void> Submit(Task task);

  // Runs fn(i, thread_index) for i in [0, n) on the pool, blocking until all are done.
  // Rethrows the first exception after every call has finished; after a call throws, no
  // new ones start. The calls run under the caller's CancelScope token (gpufeed/cancel.h).
  void ParallelFor(int64_t n, const std::function<void(int64_t i, int thread_index)>& fn);

 private:
  void Run(int thread_index);

  BoundedQueue<std::packaged_task<void(int)>> queue_;
  std::vector<std::thread> threads_;
};

}  // namespace gpufeed
