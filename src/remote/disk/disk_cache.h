// DiskCacheFileSystem: remote bytes kept on local disk, shared by every process of the node.
//
// A FileSystem wrapped around another (the remote one): Open opens the base file (its size
// and version pinned), and reads are served from blocks on disk,
// <dir>/<XXH3-128 of (path, size, version, block size)>/<block index>. A missing block is
// fetched from the base file (the missing blocks of one ReadMany in one base ReadMany),
// written with a checksummed trailer (disk_cache_layout.h) under a temporary name, flushed
// to the disk (fdatasync) and renamed into place, the folder flushed once per batch; so a
// killed downloader leaves only a temporary, never served and removed by the next scan, and a
// power cut never leaves a published block whose tail was not written. One process fetches a
// block while the others wanting it wait for it and then read it from disk
// (disk_cache_store.h: the locks). A new version of an object (another ETag or size) has
// another key: the old version's blocks are never served for it.
//
// A process checks each block against its trailer the first time it reads it, and reads it
// without checks afterwards. A block cut short, with a zero-filled tail or whose checksum does
// not match is logged once (a warning naming the block file, the object and what is wrong),
// removed, fetched again and counted (DiskCacheStats::damaged); a block written by a gpufeed
// of another layout is fetched again with one line of information per process.
//
// The bytes of blocks on disk are kept within the budget for all processes together: when a
// fetch would pass it, the least recently read blocks that no process is reading are
// evicted (a read refreshes a block's mtime, at most once a second). Blocks that cannot fit
// (every block held) are served without being kept.
//
// Files whose base has neither a version stamp nor a modification time are not cached (a
// rewrite could not be told apart): their reads go to the base file.
//
// Thread-safety: a DiskCacheFileSystem and its files are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/file.h"

namespace gpufeed {

class DiskCacheStore;

struct DiskCacheOptions {
  // Default: empty = $XDG_CACHE_HOME/gpufeed/remote, else ~/.cache/gpufeed/remote. Made
  // 0700 when absent; refused unless it is this user's own with no group or other access.
  std::string dir = {};
  // Default: 0 = half the space free on dir's file system at construction. Bytes of blocks
  // on disk (their trailers included), for all processes using dir together.
  uint64_t budget_bytes = 0;
  uint64_t block_bytes = uint64_t{8} << 20;  // Default: 8 MiB; 4 KiB to 1 GiB
};

// What the cache did so far for the files of one DiskCacheFileSystem.
struct DiskCacheStats {
  int64_t hits = 0;           // blocks read from disk
  int64_t misses = 0;         // blocks fetched from the base file system
  int64_t bytes_fetched = 0;  // bytes read from the base file system
  int64_t bytes_evicted = 0;  // bytes of blocks this process evicted to keep the budget
  int64_t waits = 0;          // blocks waited for while another process fetched them
  int64_t stale_removed = 0;  // temporaries of killed downloaders removed
  int64_t uncached = 0;       // blocks fetched but not kept (no room, or a disk error)
  int64_t damaged = 0;        // damaged blocks found on disk, removed and fetched again
};

// $XDG_CACHE_HOME/gpufeed/remote, else $HOME/.cache/gpufeed/remote.
std::string DefaultDiskCacheDir();

class DiskCacheFileSystem : public FileSystem {
 public:
  // Opens (making it when absent) the cache folder. Throws Error(kInvalidArgument) when the
  // budget cannot hold one block file or block_bytes is out of range, Error(kIo) when the folder
  // is refused or cannot be made.
  DiskCacheFileSystem(std::shared_ptr<const FileSystem> base, DiskCacheOptions options = {});
  ~DiskCacheFileSystem() override;

  std::unique_ptr<File> Open(const std::string& path) const override;
  PathType Type(const std::string& path) const override { return base_->Type(path); }
  std::vector<DirEntry> List(const std::string& path) const override { return base_->List(path); }
  std::string WhyMissing(const std::string& path) const override { return base_->WhyMissing(path); }

  const std::string& dir() const;
  uint64_t budget_bytes() const;
  uint64_t block_bytes() const { return block_bytes_; }
  DiskCacheStats stats() const;
  // Removes temporaries left by killed downloaders and evicts down to the budget. Returns
  // the bytes of blocks in the cache afterwards.
  uint64_t CollectGarbage() const;

 private:
  std::shared_ptr<const FileSystem> base_;
  uint64_t block_bytes_ = 0;
  std::shared_ptr<const DiskCacheStore> store_;
};

// `base` behind a node-local disk cache (see DiskCacheFileSystem).
std::shared_ptr<const FileSystem> RemoteDiskCache(std::shared_ptr<const FileSystem> base,
                                                  DiskCacheOptions options = {});

// From now on, DefaultFileSystem() reads every s3:// and http(s):// path of the process through
// a node-local disk cache with `options` (the sources opened after this call; files already
// open keep reading as they did). Throws as DiskCacheFileSystem's constructor.
void UseRemoteDiskCache(const DiskCacheOptions& options);
// The folder of the disk cache UseRemoteDiskCache put in front of the process's remote reads;
// empty when none is.
std::string RemoteDiskCacheDir();

}  // namespace gpufeed
