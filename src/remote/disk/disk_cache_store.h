// The folder of the node-local disk cache (DiskCacheFileSystem, disk_cache.h): one folder per
// object version holding its blocks, the byte budget every process of the node shares,
// least-recently-used eviction, and the removal of temporaries left by killed downloaders.
//
// Layout: <dir>/usage (8 bytes: the bytes of blocks and temporaries, kept under an exclusive
// flock on the file), <dir>/<key>/lock (the object's block locks, below), <dir>/<key>/object
// (which object the folder holds), <dir>/<key>/<index> (a whole block: its payload and a
// checksummed trailer, disk_cache_layout.h) and <dir>/<key>/<index>.tmp.<pid>.<n> (a block
// being written).
//
// Block locks are OFD byte-range locks on the object's lock file, byte `index` for block
// `index`: a reader holds a read lock while it reads a block, a downloader a write lock while
// it fetches and publishes one, an evictor takes the write lock without waiting and skips the
// block when it is held. OFD locks belong to an open file description, so two descriptors in
// one process exclude each other as two processes do; one lock file per object (not one per
// block) means a lock file is never removed while a process waits on it, and a read locks a
// run of blocks in one call.
//
// Whoever holds a write lock never waits for another lock, and readers wait only for read
// locks while they hold no write lock, so no two processes wait on each other.
//
// Thread-safety: a DiskCacheStore is thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "remote/disk/disk_cache_layout.h"

namespace gpufeed {

// What the cache has done so far, summed over the files of one DiskCacheFileSystem.
struct DiskCacheCounters {
  std::atomic<int64_t> hits{0};           // blocks read from disk
  std::atomic<int64_t> misses{0};         // blocks fetched from the base file system
  std::atomic<int64_t> bytes_fetched{0};  // bytes read from the base file system
  std::atomic<int64_t> bytes_evicted{0};  // bytes of blocks this process evicted
  std::atomic<int64_t> waits{0};          // blocks waited for while another process fetched
  std::atomic<int64_t> stale_removed{0};  // temporaries of killed downloaders removed
  std::atomic<int64_t> uncached{0};       // blocks fetched but not kept (no room, disk error)
  std::atomic<int64_t> damaged{0};        // damaged blocks found, removed and fetched again
};

// The lock of block `index` on an object's lock file `fd`: `type` is F_RDLCK, F_WRLCK or
// F_UNLCK. TryLockBlock returns false when another descriptor holds a conflicting lock;
// WaitLockBlock waits for it. Both throw Error(kIo) naming `path` on other failures.
bool TryLockBlock(int fd, uint64_t index, short type, const std::string& path);
void WaitLockBlock(int fd, uint64_t index, short type, const std::string& path);

// A folder of this user's own: made 0700 (parents too) when absent, opened without
// following a symlink and checked to be a directory owned by this user with no group or
// other permissions. Returns its descriptor; throws Error(kIo) naming `path` otherwise.
int OpenOwnedDir(const std::string& path);
// `name` in folder `dir_fd` opened with `flags` (O_NOFOLLOW added; with O_CREAT mode 0600)
// and checked to be a regular file of this user with no group or other permissions.
// Returns -1 when it is absent; throws Error(kIo) naming `display` when it is something else.
int OpenOwnedFileAt(int dir_fd, const std::string& name, int flags, const std::string& display);

// The names in folder `dir_fd`, without "." and "..".
std::vector<std::string> ListNames(int dir_fd);
// Whether `name` in the cache folder is an object's folder (32 hex digits).
bool IsObjectKey(std::string_view name);

// A block about to be written: its index, its length and the temporary it is written to.
struct BlockTemp {
  uint64_t index = 0;
  uint64_t length = 0;    // payload bytes
  std::string temp_name;  // set by Reserve
  int fd = -1;            // set by Reserve; -1 once published (renamed into place)

  uint64_t file_bytes() const { return BlockFileBytes(length); }
};

class DiskCacheStore {
 public:
  // Opens (making it when absent) the cache folder. REQUIRES: budget_bytes >= block_bytes.
  DiskCacheStore(std::string dir, uint64_t budget_bytes);
  ~DiskCacheStore();
  DiskCacheStore(const DiskCacheStore&) = delete;
  DiskCacheStore& operator=(const DiskCacheStore&) = delete;

  const std::string& dir() const { return dir_; }
  uint64_t budget_bytes() const { return budget_; }
  DiskCacheCounters& counters() const { return counters_; }

  // The folder of object `key` (made when absent, with its lock file and, where the file
  // system allows, its `object` file saying `info`); the caller closes it.
  int OpenObjectDir(const std::string& key, const ObjectInfo& info) const;

  // Makes room for `blocks` within the budget (evicting least-recently-used blocks no process
  // holds) and creates each block's temporary at its full length in `object_fd`. The caller
  // holds the blocks' write locks. False (nothing created) when they do not fit.
  bool Reserve(int object_fd, std::span<BlockTemp> blocks) const;
  // Closes and removes the temporaries of `blocks` still open (fd >= 0) and gives their
  // bytes back, under the usage lock so that a scan never counts them twice or not at all.
  void Release(int object_fd, std::span<BlockTemp> blocks) const;
  // Removes block `index` of `object_fd` (`bytes` on disk) and gives its bytes back. The
  // caller holds the block's write lock. False when it could not be removed.
  bool RemoveBlock(int object_fd, uint64_t index, uint64_t bytes) const;
  // Removes the temporaries of killed downloaders and evicts down to the budget. Returns the
  // bytes in the cache afterwards.
  uint64_t CollectGarbage() const;

  // The blocks this process has checked against their trailers, by path and inode: each is
  // checked the first time it is read, and read without checks afterwards (a block file is
  // never rewritten in place; one replaced under its name has another inode).
  bool Verified(const std::string& block_path, ino_t inode) const;
  void SetVerified(const std::string& block_path, ino_t inode) const;
  // True the first time it is called: the one call that logs blocks of another layout.
  bool FirstOtherLayout() const { return !other_layout_seen_.exchange(true); }

 private:
  struct ObjectLocks;
  std::optional<uint64_t> ReadUsage() const;
  void WriteUsage(uint64_t bytes) const;
  // Under the usage lock: the bytes in the cache after removing stale temporaries and
  // evicting until `need` more bytes fit (down to `target` when eviction is needed at all).
  uint64_t ScanAndEvict(uint64_t need) const;

  const std::string dir_;
  const uint64_t budget_;
  int dir_fd_ = -1;
  int usage_fd_ = -1;
  // The usage file's flock belongs to its one descriptor, shared by this process's threads.
  mutable std::mutex usage_mu_;
  mutable std::atomic<uint64_t> temp_counter_{0};
  mutable DiskCacheCounters counters_;
  mutable std::mutex verified_mu_;
  mutable std::unordered_map<std::string, ino_t> verified_;  // guarded by verified_mu_
  mutable std::atomic<bool> other_layout_seen_{false};
};

}  // namespace gpufeed
