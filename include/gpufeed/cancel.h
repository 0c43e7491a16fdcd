// Cancellation of long calls. A CancelToken is a flag one thread sets to stop work another
// thread is doing; a CancelScope makes a token the current one of the thread that does the
// work. The long phases of opening a loader check the current token at a coarse grain (every
// few MB, every 50 ms of waiting) and, once it is cancelled, clean up what they made and throw
// Error(kCancelled): a shared-memory cache build (its half-written file is removed, never
// published, and the build lock released), a RAM preload, a device upload, the wait for
// another process's build, and a large HDF5 chunk index read through libhdf5.
// ThreadPool::ParallelFor carries the caller's token to its workers, so a phase's worker
// threads see it too.
//
//   gpufeed::CancelToken cancel;                 // another thread (or a signal handler) calls
//   gpufeed::CancelScope scope(&cancel);         // cancel.Cancel() to stop the open below
//   auto opened = gpufeed::OpenLoader(recipe);   // Error(kCancelled) once cancelled
//
// The Python package runs the open on a thread of its own under a scope, and cancels it on
// Ctrl-C (KeyboardInterrupt); the CLI cancels it from its SIGINT handler.
//
// Thread-safety: CancelToken is thread-safe; Cancel() is one lock-free atomic store, so a
// signal handler may call it. A CancelScope belongs to the thread that made it and must end on
// that thread, scopes nesting like blocks; its token must outlive it.
#pragma once

#include <atomic>
#include <string_view>

namespace gpufeed {

class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Asks the work under this token to stop. Never undone.
  void Cancel() noexcept { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> cancelled_{false};
  static_assert(std::atomic<bool>::is_always_lock_free, "Cancel() must be async-signal-safe");
};

// Makes `token` the calling thread's current token until the scope ends, then restores the
// one before. A null token means "not cancellable" within the scope.
class CancelScope {
 public:
  explicit CancelScope(const CancelToken* token) noexcept;
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const CancelToken* previous_;
};

// The calling thread's current token, or null outside every scope.
const CancelToken* CurrentCancelToken() noexcept;

// Whether the calling thread's current token has been cancelled.
bool CancelRequested() noexcept;

// Throws Error(kCancelled, "<what>: interrupted") when CancelRequested().
void ThrowIfCancelled(std::string_view what);

}  // namespace gpufeed
