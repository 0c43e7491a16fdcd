// The shared-memory cache protocol across processes, for one key:
//   1. open gpufeed-<key>.lock and take flock(LOCK_EX) (waiters block here; a builder's death
//      releases the lock);
//   2. the published gpufeed-<key> verifies (header, identity, schema) -> map it and serve;
//      one that does not verify is removed;
//   3. else remove tmp files of builders that died (none can be alive: we hold the lock),
//      build gpufeed-<key>.tmp-<pid>, rename it to gpufeed-<key>;
//   4. release the lock.
// Thread-safety: OpenShmCache may be called from many threads and processes at once.
#pragma once

#include <memory>
#include <string>

#include "cache/shm_builder.h"
#include "gpufeed/source.h"

namespace gpufeed {

struct ShmOpenOptions {
  std::string dir = "/dev/shm";  // Default: /dev/shm
  int threads = 1;               // Required: > 0 (build parallelism)
  bool verbose = true;           // Default: true: waits, rebuilds and failures on stderr
  ShmBuildFaults faults = {};    // Default: none (tests inject ENOSPC)
};

struct ShmOpenResult {
  // The cached source, or null when the build failed for lack of space or a write error
  // (already warned on stderr when verbose): the caller streams from the base source.
  std::shared_ptr<Source> source = nullptr;
  bool built = false;            // this call built the file
  bool removed_leftover = false; // it removed a half-built file of a dead builder
  std::string path = {};
  std::string key = {};
  std::string failure = {};      // why source is null
};

// Throws Error(kNotFound) when `options.dir` does not exist, Error(kIo) when the lock file
// cannot be made, and what the base source throws while the file is built.
ShmOpenResult OpenShmCache(std::shared_ptr<Source> base, const ShmOpenOptions& options);

// "<dir>/gpufeed-<key>", its ".lock" and the ".tmp-" prefix of its builders' files.
std::string ShmCachePath(const std::string& dir, const std::string& key);

}  // namespace gpufeed
