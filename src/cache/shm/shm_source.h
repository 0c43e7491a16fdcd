// ShmCachedSource: serves samples from a published shared-memory cache file, mapped
// read-only, gathered with the RAM tier's own loop (GatherCachedRows), so later epochs run
// at the RAM tier's speed while every process of the node shares one copy.
//
// What is checked, and when (docs/design.md, "Trust boundary"): the file lives in the user's own
// folder (0700; files 0600; in a group's folder only its builder can write it), so only its
// owner can change it, and the owner could as well rewrite the source files. Re-hashing every
// block on every read would defend against no one, so it is not done. At open, OpenShmCache
// checks the owner and mode, the header, its keyed checksum and its field table against the
// source's schema; the builder writes a hash per block at publication, which
// `gpufeed cache verify` (VerifyShmCache) re-checks on request (gpufeed/shm_caches.h).
//
// A file truncated under a reader (another process of the user cutting it short) would raise
// SIGBUS on the next access to a page past its new end; each batch's copy runs inside
// GuardMappedRead, so it is Error(kIo) naming the cache instead.
// The file descriptor holds a shared flock while open: `gpufeed cache ls` counts holders.
// Thread-safety: thread-safe (Read from many workers at once; the mapping is read-only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cache/cached_source.h"
#include "cache/shm/shm_format.h"

namespace gpufeed {

class ShmCachedSource : public CachedSource {
 public:
  // Takes ownership of `fd` (open on the published file, `header` decoded from it and checked
  // against `base` with CheckShmHeaderFor) and maps the file. Throws Error(kIo) naming `path`
  // when it cannot be mapped (`fd` is closed then).
  ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path, ShmHeader header);
  ~ShmCachedSource() override;

  std::string Describe() const override;
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  // Throws Error(kIo) naming the cache when the file shrank under the mapping.
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;

  const std::string& path() const { return path_; }
  uint64_t blocks() const { return header_.layout.blocks; }

 private:
  int fd_ = -1;
  std::string path_;
  ShmHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<const std::byte*> arrays_;  // each field's first row in the mapping
  std::vector<size_t> row_bytes_;
};

}  // namespace gpufeed
