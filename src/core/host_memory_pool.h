// HostMemoryPool: the process-wide store of large host allocations (batch buffers) on 2 MB
// pages. A loader's buffers come back here when its BufferPool dies, already faulted in, and
// the next loader of the process (the next hyper-parameter trial, the validation loader)
// takes them again instead of faulting in fresh memory: on a VM, first touch of fresh
// memory costs about 1 s per 400 MB (the kernel zeroes every page, and under nested paging
// the host backs it too), which made a loader at batch 8192 spend most of a second in its
// constructor.
//
// Blocks are 2 MB-aligned, madvise(MADV_HUGEPAGE)'d and sized in whole 2 MB pages, or in
// whole 4 KiB pages where a last 2 MB page would waste more than an eighth of the block
// (small batches: 2 MB + 2 KB is not rounded to 4 MB). Take returns a kept block of the
// same rounded size when there is one (its bytes are whatever
// the last user left: callers overwrite what they read) or a fresh one, faulted in by the
// calling thread (MADV_POPULATE_WRITE, or a write per page where the kernel lacks it), so
// the cost lands on the thread that takes it (a loader worker), not on a later reader.
// Give keeps a block for later, within a retention budget (default: 1/8 of physical RAM, at
// most 8 GiB; GPUFEED_HOST_POOL_BYTES overrides, 0 keeps nothing); what does not fit is
// freed at once.
//
// Thread-safety: thread-safe. The pool lives for the whole program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gpufeed {

class HostMemoryPool {
 public:
  struct Counters {
    int64_t taken_fresh = 0;  // blocks allocated and faulted in by Take
    int64_t taken_kept = 0;   // blocks Take found kept (no fault, no zeroing)
    int64_t kept_bytes = 0;   // bytes kept now
    int64_t freed = 0;        // blocks Give freed (over the budget)
    int64_t fresh_bytes = 0;  // bytes of the blocks allocated and faulted in by Take
    int64_t fault_ns = 0;     // time Take spent allocating and faulting them in (all threads)
  };

  static HostMemoryPool& Instance();

  // A block of at least `bytes` (rounded up as Rounded says). Throws Error(kDevice) when
  // the host has no memory for it. REQUIRES: bytes > 0.
  void* Take(size_t bytes);
  // Takes back a block Take gave: kept for later, or freed when over the budget. Returns
  // false (and does nothing) for a pointer Take did not give. Never throws.
  bool Give(void* block) noexcept;
  // Frees every kept block (tests; a program that wants its memory back). Returns the bytes
  // freed.
  uint64_t Trim() noexcept;
  Counters counters() const;
  // The retention budget in bytes. Tests set it; SetRetainBytes(0) frees what is kept.
  void SetRetainBytes(uint64_t bytes) noexcept;
  static size_t Rounded(size_t bytes);

 private:
  HostMemoryPool();
  // Frees kept blocks, largest first, until kept_bytes_ <= retain_. REQUIRES: mu_ held.
  void TrimToBudgetLocked() noexcept;

  mutable std::mutex mu_;
  uint64_t retain_;
  std::map<size_t, std::vector<void*>> kept_;  // by rounded size; LIFO per size
  std::unordered_map<void*, size_t> given_;    // blocks out, with their rounded size
  Counters counters_;
};

}  // namespace gpufeed
