// ShmCachedSource: serves samples from a published shared-memory cache file mapped read-only.
// Each 16 KiB block is checked against its hash the first time this process reads from it (a
// per-process bitmap of verified blocks); a block that fails makes the source warn once and
// read every later batch from the base source, so damaged bytes are never served.
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
  // Takes ownership of `fd` (open on the published file, `header` decoded from it) and maps it.
  // `verified` marks every block as verified already (the builder hashed what it wrote).
  // Throws Error(kIo) naming `path` when the mapping fails.
  ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path, ShmHeader header,
                  bool verified);
  ~ShmCachedSource() override;

  std::string Describe() const override;
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;

  const std::string& path() const { return path_; }
  uint64_t blocks() const { return header_.layout.blocks; }
  // Blocks this process has checked so far.
  uint64_t verified_blocks() const;
  // True once a block failed its check (later reads come from the base source).
  bool damaged() const { return damaged_.load(std::memory_order_acquire); }

 private:
  // False when a block of [begin, end) of the data region fails its hash.
  bool Verify(uint64_t begin, uint64_t end) const;

  int fd_ = -1;
  std::string path_;
  ShmHeader header_;
  const std::byte* map_ = nullptr;
  const std::byte* data_ = nullptr;
  std::unique_ptr<std::atomic<uint64_t>[]> verified_;
  mutable std::atomic<bool> damaged_{false};
};

}  // namespace gpufeed
