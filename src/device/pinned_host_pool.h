// PinnedHostPool: the process-wide store of pinned host buffers (the CUDA staging buffers
// batches are built in). A loader's buffers come back here when its BufferPool dies, still
// pinned, and the next loader of the process (the next evaluation, trial or validation
// pass) takes them again: pinning a loader's staging buffers (cuMemHostAlloc) and unpinning
// them (cuMemFreeHost) cost a large part of a short loader's life.
//
// A kept buffer holds a reference to the context that pinned it (its memory lives as long
// as that context), so a program that closed its last loader keeps the GPU's primary
// context retained while buffers are kept. Take returns a kept buffer of exactly the size
// asked, pinned through the same driver, or a fresh one (its bytes are whatever the last
// user left: callers overwrite what they read). Give keeps a buffer for later within a
// retention budget (default: 1/16 of physical RAM, at most 4 GiB; GPUFEED_PINNED_POOL_BYTES
// overrides, 0 keeps nothing); what does not fit is unpinned at once. PORTABLE buffers serve
// any device of their driver.
//
// Thread-safety: thread-safe. The pool lives for the whole program; in a child forked after
// CUDA was loaded it does nothing (the parent's buffers are not the child's to free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/cuda_context.h"

namespace gpufeed::cuda {

class PinnedHostPool {
 public:
  struct Counters {
    int64_t taken_fresh = 0;  // buffers pinned by Take
    int64_t taken_kept = 0;   // buffers Take found kept
    int64_t kept_bytes = 0;   // bytes kept now
    int64_t freed = 0;        // buffers unpinned (over the budget, or by Trim)
  };

  static PinnedHostPool& Instance();

  // A pinned buffer of `bytes` for `context`'s driver: a kept one, else fresh from
  // cuMemHostAlloc (PORTABLE). Throws Error(kDevice) naming the device and the size when the
  // driver refuses. REQUIRES: bytes > 0.
  void* Take(const std::shared_ptr<const CudaContext>& context, size_t bytes);
  // Takes back a buffer Take gave: kept for later, or unpinned when over the budget. Returns
  // false (and does nothing) for a pointer Take did not give. Never throws.
  bool Give(void* buffer) noexcept;
  // Unpins every kept buffer and drops the contexts they held (tests; a program that wants
  // its memory back). Returns the bytes unpinned.
  uint64_t Trim() noexcept;
  Counters counters() const;
  // The retention budget in bytes. Tests set it; SetRetainBytes(0) unpins what is kept.
  void SetRetainBytes(uint64_t bytes) noexcept;

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    std::shared_ptr<const CudaContext> context;  // pinned it; keeps its memory alive
  };
  PinnedHostPool();
  // Unpins kept buffers, oldest first, until kept_bytes <= retain_. REQUIRES: mu_ held.
  void TrimToBudgetLocked() noexcept;
  void Unpin(Buffer& buffer) noexcept;

  mutable std::mutex mu_;
  uint64_t retain_;
  std::vector<Buffer> kept_;                     // oldest first
  std::unordered_map<void*, Buffer> given_;      // buffers out
  Counters counters_;
};

}  // namespace gpufeed::cuda
