// The shared-memory caches of a node, as `gpufeed cache` administers them: listing them
// (ls), removing one (rm) or the older versions of a data set, re-hashing one against the
// hashes written when it was built (verify), and collecting garbage and evicting by age or
// size (gc). The caches themselves are made by OpenCached (gpufeed/cache.h, tier shm).
//
// Thread-safety: every function is thread-safe, and safe against other processes using the
// same folder at once (they coordinate with flock; nothing is removed while a process maps it,
// except by RemoveShmCache).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/cache.h"

namespace gpufeed {

// One shared-memory cache in a folder (`gpufeed cache ls`).
struct ShmCacheEntry {
  std::string key;
  std::string path;
  std::string description;  // the source's Describe() when it was built
  std::string identity;     // the source's Identity() when it was built
  uint64_t bytes = 0;       // file size
  double age_seconds = 0;   // since it was published
  int processes = -1;       // processes mapping it now (shared flocks); -1 = unknown
  bool valid = true;        // the header verifies
  bool stale = false;       // a file named in the identity changed size or mtime, or is gone
  bool half_built = false;  // a tmp file whose builder is gone
  // The data the cache holds: a NumPy folder, or the data files its identity names; empty
  // when it names none (a synthetic or in-memory source).
  std::vector<std::string> sources;
  double idle_seconds = -1;  // since a process last opened it; -1 = unknown
  double built_share = 1;    // share of its bytes written: 1 once published
};

// Published caches, tmp files of builds (half_built when no builder holds the lock) and
// unreadable or refused files named gpufeed-* in the calling user's cache folder under `dir`
// (<dir>/gpufeed-user-<uid>; with `group`, that group's folder <dir>/gpufeed-group-<gid>), by
// key. Nothing is followed or blocked on: a FIFO or symlink
// under a cache's name is listed as refused. Throws Error(kIo) when that folder is not the
// user's own (planted by another user), Error(kInvalidArgument) for a group the user is not in.
std::vector<ShmCacheEntry> ListShmCaches(const std::string& dir = kShmRoot,
                                         const std::string& group = "");
// Removes the cache `key` (its file, lock and leftovers). Processes mapping it keep their
// copy until they unmap it. Returns false when there was nothing to remove.
bool RemoveShmCache(const std::string& key, const std::string& dir = kShmRoot,
                    const std::string& group = "");
// Removes the caches of older versions of the files `identity` names (a Source::Identity():
// the same files, rewritten since) that no process maps, in the folder ListShmCaches(dir,
// group) reads; returns what it removed. Called when a new version is built, so a data set
// rewritten daily does not fill /dev/shm.
std::vector<ShmCacheEntry> RemoveOlderShmVersions(const std::string& identity,
                                                  const std::string& dir = kShmRoot,
                                                  const std::string& group = "");
// What `gpufeed cache verify` found: every block of a published cache re-hashed against the
// hashes its builder wrote at publication.
struct ShmVerifyReport {
  std::string key;
  std::string path;
  std::string description;  // the source's Describe() when it was built
  uint64_t bytes = 0;       // file size
  uint64_t blocks = 0;      // blocks in the file
  uint64_t checked = 0;     // blocks hashed (all of them when ok; up to the first bad one)
  bool ok = false;
  int64_t first_bad_block = -1;  // -1 when ok
  // Where the first bad block lies: "block 17 of 760: field 'mel', samples 17 to 17, file
  // bytes 73728 to 77824"; empty when ok.
  std::string first_bad;
};

// Re-hashes every block of the cache `key` in the folder ListShmCaches(dir, group) reads and
// stops at the first that differs from its hash. The header is checked as at open (owner,
// mode, keyed checksum) and its texts must give `key`. Readers do not re-hash blocks (only the
// owner can write the file; see docs/design.md), so this is how damage is found. Throws
// Error(kInvalidArgument) for a malformed key, Error(kNotFound) when there is no such cache,
// Error(kIo) when the folder or file is refused or cannot be read (changed size), and
// Error(kCorruptData) when the header fails its checks.
ShmVerifyReport VerifyShmCache(const std::string& key, const std::string& dir = kShmRoot,
                               const std::string& group = "");

// What `gpufeed cache gc` removes beyond garbage. Eviction never removes a cache a process
// holds (maps) now, nor one whose holders cannot be counted.
struct ShmGcOptions {
  double older_than_s = 0;  // Default: 0 = no limit. Else caches unused for longer go too.
  // Default: 0 = no limit. Else the least recently used caches go until those left take at
  // most this many bytes.
  uint64_t max_bytes = 0;
};

// Removes leftovers of dead builders, invalid files, caches whose source files changed or are
// gone, and what `options` evicts; returns what it removed. Caches it would have removed but a
// process holds are kept and listed in `*held` when given.
std::vector<ShmCacheEntry> CollectShmGarbage(const std::string& dir = kShmRoot,
                                             const std::string& group = "",
                                             const ShmGcOptions& options = {},
                                             std::vector<ShmCacheEntry>* held = nullptr);

// The published caches whose sources are `source` or lie under it (a data file, or a folder
// of them; made absolute and resolved like the sources' own paths), in the folder
// ListShmCaches(dir, group) reads.
std::vector<ShmCacheEntry> ShmCachesOfSource(const std::string& source,
                                             const std::string& dir = kShmRoot,
                                             const std::string& group = "");

}  // namespace gpufeed
