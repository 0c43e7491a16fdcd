// ShmCachedSource: serves samples from a published shared-memory cache file.
//
// Verification holds against a writer: the file is shared, so its bytes can change after any
// check of them (another process of this user, or root, writing it). So nothing is served
// from the file itself: each read copies the rows with pread(2) into memory private to this
// process (the batch buffer for rows of kShmBlockBytes or more; a per-worker scratch block
// for smaller rows, which are copied out from there), hashes that private copy against the
// row's block hash and serves only what matched (verify what is copied). A block that fails
// makes the source warn once and read that batch and every later one from the base source,
// so damaged or rewritten bytes are never served. The caller's `out` must be memory no other
// process writes (a loader's batch buffers are): what is hashed there is what is served.
//
// Why pread and not a mapping: on a VM the first touch of every 4 KB page of a new mapping
// traps (tens of microseconds under paravirtualised paging), so a new process's first batch
// of 8192 random 8 KiB rows from a mapping took 0.3-0.6 s in traps alone; pread copies
// through the kernel's own map and pays one system call per run of adjacent rows. The
// copy was needed anyway (the mapping was shared, so rows were copied out before hashing).
// A file truncated under a reader is an Error(kIo) naming it.
// The file descriptor holds a shared flock while open: `gpufeed cache ls` counts users.
// Thread-safety: thread-safe (Read from many workers at once; verification races only
// repeat a hash, the bitmap is atomic).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cache/cached_source.h"
#include "cache/shm_format.h"

namespace gpufeed {

class ShmCachedSource : public CachedSource {
 public:
  // Takes ownership of `fd` (open on the published file, `header` decoded from it and checked
  // against `base` with CheckShmHeaderFor).
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
  // Copies the rows of `indices` into `out` and verifies the copies. False when a block fails
  // its hash (nothing trustworthy was written then). Throws Error(kIo) naming the file when
  // it cannot be read (truncated under us).
  bool CopyVerified(std::span<const int64_t> indices, const BatchView& out,
                    SourceWorkerState* state) const;
  // pread of exactly `bytes` at data-region offset `at` into `dst`; throws Error(kIo).
  void ReadExactly(std::byte* dst, uint64_t bytes, uint64_t at) const;
  void MarkVerified(uint64_t block) const;

  int fd_ = -1;
  std::string path_;
  ShmHeader header_;
  std::unique_ptr<std::atomic<uint64_t>[]> verified_;
  mutable std::atomic<bool> damaged_{false};
};

}  // namespace gpufeed
