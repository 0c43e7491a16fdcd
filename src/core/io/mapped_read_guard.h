// Reading from a file mapping that may shrink under the reader.
//
// A file mapped with mmap and then truncated (np.save over the same path, a cache file cut
// short) raises SIGBUS on the next access past its new end, which kills the process. Every
// copy out of a mapping of an untrusted file runs inside GuardMappedRead: a SIGBUS there
// becomes Error(kIo, "<path>: changed size while being read") thrown on the thread that hit it.
//
// How: one process-wide SIGBUS handler, installed on first use, and a per-thread jump buffer.
// The handler jumps back (siglongjmp) only when the faulting thread is inside a guarded copy;
// any other SIGBUS goes to the handler that was installed before (or, if that was the
// default or "ignore", is re-raised with the default action, so the process still dies as it
// would have without gpufeed). Why this over the alternatives: pread instead of the mapping
// costs a copy and a syscall per run on the hot path; checking the size with fstat before
// each copy still races with a truncation; a guarded copy costs one sigsetjmp (one
// sigprocmask) per guarded call, so callers guard a whole batch's copy, not each row.
//
// Thread-safety: thread-safe; each thread has its own guard. Not re-entrant: a guarded copy
// must not start another.
#pragma once

#include <csetjmp>
#include <string>

namespace gpufeed {
namespace mapped_read_internal {

// The calling thread's jump buffer while it is inside a guarded copy.
struct ThreadGuard {
  sigjmp_buf env;
};
// Installs the handler (once) and marks `guard` as the calling thread's active one.
void Enter(ThreadGuard* guard);
// Unmarks it.
void Leave();
[[noreturn]] void ThrowChangedSize(const std::string& path);

}  // namespace mapped_read_internal

// Runs `copy()`, which reads from a mapping of the file at `path`. Throws Error(kIo) naming
// `path` when the mapping faults (the file shrank).
// REQUIRES: `copy` creates nothing that needs destroying (plain memcpy loops over
// pre-sized buffers): a fault leaves it with a jump, and its destructors would not run.
template <typename Copy>
void GuardMappedRead(const std::string& path, Copy&& copy) {
  mapped_read_internal::ThreadGuard guard;
  mapped_read_internal::Enter(&guard);
  if (sigsetjmp(guard.env, /*savemask=*/1) != 0) {
    mapped_read_internal::Leave();
    mapped_read_internal::ThrowChangedSize(path);
  }
  copy();
  mapped_read_internal::Leave();
}

}  // namespace gpufeed
