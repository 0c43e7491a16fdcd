#include "core/thread_pool.h"

#include <atomic>
#include <exception>
#include <mutex>

#include "gpufeed/cancel.h"

namespace gpufeed {

ThreadPool::ThreadPool(int threads, size_t queue_capacity) : queue_(queue_capacity) {
  GPUFEED_ASSERT(threads > 0, "a thread pool needs at least one thread");
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Run(i); });
}

ThreadPool::~ThreadPool() {
  queue_.Close();
  for (auto& t : threads_) t.join();
}

std::future<void> ThreadPool::Submit(Task task) {
  std::packaged_task<void(int)> packaged(std::move(task));
  std::future<void> future = packaged.get_future();
  const bool queued = queue_.Push(std::move(packaged));
  GPUFEED_ASSERT(queued, "Submit on a pool being destroyed");
  return future;
}

void ThreadPool::ParallelFor(int64_t n,
                             const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  // One task per thread pulling indices from a shared counter balances uneven work.
  std::atomic<int64_t> next{0};
  const int64_t tasks = std::min<int64_t>(n, size());
  // The caller's cancellation token is the workers' too while they run its calls (the call
  // blocks until they are done, so the token outlives them).
  const CancelToken* cancel = CurrentCancelToken();
  // The first failure is kept here, not in the tasks' futures: a worker's last reference to
  // its exception then goes before its task completes, and the exception dies on the calling
  // thread. (Through a future, the worker could drop the last reference while the caller was
  // still reading the message: a race ThreadSanitizer reports, since libstdc++'s reference
  // counts are invisible to it.)
  std::mutex error_mu;
  std::exception_ptr first;  // guarded by error_mu until the futures are ready
  std::vector<std::future<void>> futures;
  futures.reserve(static_cast<size_t>(tasks));
  for (int64_t t = 0; t < tasks; ++t) {
    futures.push_back(Submit([&, cancel](int thread_index) {
      CancelScope scope(cancel);
      try {
        for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, thread_index);
      } catch (...) {
        next.store(n);  // the other workers stop taking work at once
        std::lock_guard lock(error_mu);
        if (!first) first = std::current_exception();
      }
    }));
  }
  for (auto& f : futures) f.get();
  if (first) std::rethrow_exception(first);
}

void ThreadPool::Run(int thread_index) {
  while (auto task = queue_.Pop()) (*task)(thread_index);
}

}  // namespace gpufeed
