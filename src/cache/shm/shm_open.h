// The shared-memory cache protocol across one user's processes, for one key, all in the
// user's own folder <dir>/gpufeed-user-<uid> (ShmUserDir: 0700, owner checked, nothing
// followed):
//   1. open gpufeed-<key>.lock (0600, checked like every file) and take flock(LOCK_EX)
//      (waiters poll, saying which process holds it, for at most lock_timeout_s; then they
//      read from the source uncached; a builder's death releases the lock);
//   2. the published gpufeed-<key> verifies (a regular file of this user, the keyed header,
//      its field table against the source's schema) -> map it and serve; anything else under
//      that name (a damaged file, a FIFO, a symlink) is removed;
//   3. else remove tmp files of builders that died (none can be alive: we hold the lock),
//      build gpufeed-<key>.tmp-<pid>, rename it to gpufeed-<key>;
//   4. release the lock.
// Caches are shared between users only through a group's folder, asked for by its group
// (ShmUserDir); the protocol there is the same, the lock taken by every member.
// Thread-safety: OpenShmCache may be called from many threads and processes at once.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cache/shm/shm_builder.h"
#include "gpufeed/cache.h"
#include "gpufeed/source.h"

namespace gpufeed {

struct ShmOpenOptions {
  std::string dir = kShmRoot;  // Default: /dev/shm (the root; caches go in the user's folder)
  // Default: none = the user's own folder; a group id: that group's shared folder.
  std::optional<gid_t> group = std::nullopt;
  int threads = 1;      // Required: > 0 (build parallelism)
  bool verbose = true;  // Default: true: waits, rebuilds and failures on stderr
  // How long to wait for another process's build; then the source is read uncached.
  double lock_timeout_s = 1800;  // Default: 30 minutes
  ShmBuildFaults faults = {};    // Default: none (tests inject ENOSPC)
  // Default: none. Else called with the share of the samples written while this call builds
  // (ShmBuildOptions::on_progress).
  std::function<void(double)> on_progress = {};
  // Default: none. Else called every 50 ms while another process holds the build lock.
  std::function<void()> while_waiting = {};
  // Default: none. Else called once this call holds the build lock and starts building.
  std::function<void()> on_build_start = {};
};

struct ShmOpenResult {
  // The cached source, or null when the build failed for lack of space or a write error
  // (already warned on stderr when verbose): the caller streams from the base source.
  std::shared_ptr<Source> source = nullptr;
  bool built = false;             // this call built the file
  bool removed_leftover = false;  // it removed a half-built file of a dead builder
  std::string path = {};
  std::string key = {};
  std::string failure = {};  // why source is null
};

// Throws Error(kNotFound) when `options.dir` does not exist, Error(kIo) when the user's folder
// or the lock file is refused (not this user's, a symlink, open to others) or cannot be made,
// and what the base source throws while the file is built; Error(kCancelled) when the calling
// thread's CancelToken (gpufeed/cancel.h) is cancelled while it waits for another builder or
// builds (nothing is published, the tmp file is removed and the lock released).
ShmOpenResult OpenShmCache(std::shared_ptr<Source> base, const ShmOpenOptions& options);

// The published cache of `base` in the folder OpenShmCache would use, when one is there and
// passes the checks at open (owner, mode, keyed header, field table against the schema):
// opened without the build lock and without creating anything, so a process that finds a
// built cache uses it at once. Null when there is none, or it or the folder is refused (the
// caller's OpenShmCache then says why, or rebuilds). Never throws.
std::shared_ptr<Source> OpenPublishedShmCache(std::shared_ptr<Source> base, const std::string& dir,
                                              std::optional<gid_t> group = std::nullopt);

// "<dir>/gpufeed-user-<uid>/gpufeed-<key>"; its ".lock" and its builders' ".tmp-<pid>" files
// lie beside it.
std::string ShmCachePath(const std::string& dir, const std::string& key,
                         std::optional<gid_t> group = std::nullopt);

}  // namespace gpufeed
