// Builds a shared-memory cache file: writes every sample of a source into a tmp file with
// pwrite (so a full /dev/shm is an ENOSPC error, never a SIGBUS through a mapping), hashes
// its blocks, writes the header last and renames the file to its published name. The caller
// holds the key's build lock (see shm_open.h).
// Thread-safety: BuildShmFile may run in many processes, each for its own tmp path.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cache/shm/shm_format.h"
#include "cache/shm/shm_user_dir.h"
#include "gpufeed/source.h"

namespace gpufeed {

// Test hooks: faults the writer injects.
struct ShmBuildFaults {
  // Fail the write that would take the file past this many bytes written with ENOSPC
  // (-1: never). Stands in for a tmpfs running full.
  int64_t enospc_after_bytes = -1;
};

struct ShmBuildOptions {
  int threads = 1;       // Required: > 0
  bool verbose = false;  // Default: false: progress on stderr for builds past 2 s
  ShmBuildFaults faults = {};
  // Default: none. Else called (from the build's threads, one at a time) with the share of
  // the samples written so far, after every few MB: a background build's progress.
  std::function<void(double)> on_progress = {};
};

enum class ShmBuildStatus {
  kPublished,    // the file is at its final path; fd is open on it
  kNoSpace,      // the folder has no room (statvfs said so, or a write failed with ENOSPC)
  kWriteFailed,  // another OS error while writing; message says which
  kRemoved,      // the tmp file was removed while it was built (`gpufeed cache rm KEY`)
};

struct ShmBuildResult {
  ShmBuildStatus status = ShmBuildStatus::kWriteFailed;
  int fd = -1;  // kPublished: open read-write on the published file; the caller owns it
  ShmHeader header = {};
  std::string message = {};  // why it failed
};

// Builds the cache of `base` as `tmp_name` in `dir` (created O_EXCL | O_NOFOLLOW, 0600) and
// publishes it as `final_name` there, its header keyed with the user's secret. On failure the
// tmp file is removed. Rethrows what the base source throws, and throws Error(kCancelled) when
// the calling thread's CancelToken (gpufeed/cancel.h) is cancelled during the build, after
// removing the tmp file.
ShmBuildResult BuildShmFile(const Source& base, const ShmUserDir& dir, const std::string& tmp_name,
                            const std::string& final_name, const ShmBuildOptions& options);

// The building process read the whole source, through its own mappings of the source's files
// where the source maps them (NumPy, contiguous HDF5): those pages were counted in its PSS for
// as long as its loader lived (782 MB for an 820 MB HDF5 set) although the cache serves from
// then on. This unmaps them (the builder calls it every 64 MB it writes, OpenShmCache once
// the cache is published): MADV_DONTNEED on a mapping without write permission only drops
// its pages from this process (they stay in the page cache; a fallback read faults them back
// in); writable mappings are left alone (a private written page would be lost). The files are
// the ones `identity` stamps ("stamp:/path="), matched by device and inode in
// /proc/self/maps. Best effort: does nothing when those cannot be read.
void DropMappedSourcePages(const std::string& identity);

}  // namespace gpufeed
