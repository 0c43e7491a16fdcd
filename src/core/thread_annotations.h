// Clang thread-safety annotations and an annotated mutex.
//
// GUARDED_BY(mu) on a member says it is only touched with `mu` held; REQUIRES(mu) on a
// function says its caller holds `mu`; EXCLUDES(mu) that it must not (the function takes it).
// Under clang with -Wthread-safety the compiler checks them (`make check-threads`); under g++
// they expand to nothing. std::mutex is not annotated in libstdc++, so guarded members use
// `Mutex` and `MutexLock` below; a condition variable waits through `CondVar`, whose callers
// write the wait loop themselves (the analysis does not follow a predicate lambda).
//
// Thread-safety: Mutex and CondVar are thread-safe, like the std types they wrap; a MutexLock
// belongs to the thread that made it.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define GPUFEED_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GPUFEED_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) GPUFEED_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY GPUFEED_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) GPUFEED_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) GPUFEED_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) GPUFEED_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) GPUFEED_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) GPUFEED_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GPUFEED_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) GPUFEED_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS GPUFEED_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace gpufeed {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Releases `mu` while it waits and holds it again when it returns (spurious wake-ups too:
  // call it in a loop that tests the condition).
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  void NotifyAll() { cv_.notify_all(); }
  void NotifyOne() { cv_.notify_one(); }

 private:
  std::condition_variable cv_;
};

}  // namespace gpufeed
