// ShmCachedSource: serves samples from a published shared-memory cache file mapped read-only.
//
// Verification holds against a writer: the mapping is MAP_SHARED, so bytes can change after
// any check of them (another process of this user, or root, writing the file). So nothing
// is served straight from the mapping: each read copies the 16 KiB blocks that hold a row
// into a per-worker scratch buffer, hashes that copy, and copies the row out of the verified
// copy (verify what is copied). A block that fails makes the source warn once and read that
// batch and every later one from the base source, so damaged or rewritten bytes are never
// served. The copies are guarded (GuardMappedRead): a file truncated under the mapping is an
// Error(kIo) naming it, not a SIGBUS.
// The file descriptor holds a shared flock while mapped: `gpufeed cache ls` counts users.
// Thread-safety: thread-safe (Read from many workers at once; verification races only
// repeat a hash, the bitmap is atomic).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cache/shm_format.h"
#include "cache/cached_source.h"

namespace gpufeed {

class ShmCachedSource : public CachedSource {
 public:
  // Takes ownership of `fd` (open on the published file, `header` decoded from it and checked
  // against `base` with CheckShmHeaderFor) and maps it. Throws Error(kIo) naming `path` when
  // the mapping fails.
  ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path, ShmHeader header);
  ~ShmCachedSource() override;

  std::string Describe() const override;
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;

  const std::string& path() const { return path_; }
  uint64_t blocks() const { return header_.layout.blocks; }
  // Distinct blocks this process has checked at least once (each read checks again).
  uint64_t verified_blocks() const;
  // True once a block failed its check (later reads come from the base source).
  bool damaged() const { return damaged_.load(std::memory_order_acquire); }

 private:
  // Copies the rows of `indices` into `out` through verified block copies. False when a
  // block fails its hash (nothing trustworthy was written then).
  bool CopyVerified(std::span<const int64_t> indices, const BatchView& out,
                    SourceWorkerState* state) const;
  void MarkVerified(uint64_t block) const;

  int fd_ = -1;
  std::string path_;
  ShmHeader header_;
  const std::byte* map_ = nullptr;
  const std::byte* data_ = nullptr;
  std::unique_ptr<std::atomic<uint64_t>[]> verified_;
  mutable std::atomic<bool> damaged_{false};
};

}  // namespace gpufeed
