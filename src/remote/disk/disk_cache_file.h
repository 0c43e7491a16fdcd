// One file of a DiskCacheFileSystem: the base file's reads served from blocks on disk.
// Thread-safety: thread-safe; every read that misses the held blocks takes its own
// descriptor of the object's lock file, so concurrent reads of one file lock blocks against
// each other as processes do.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "gpufeed/file.h"
#include "remote/disk/disk_cache_layout.h"
#include "remote/disk/disk_cache_store.h"

namespace gpufeed {

class DiskCachedFile : public File {
 public:
  // Takes ownership of `object_fd`, the object's folder in the store.
  DiskCachedFile(std::unique_ptr<File> base, std::shared_ptr<const DiskCacheStore> store,
                 int object_fd, std::string object_path, uint64_t block_bytes);
  ~DiskCachedFile() override;

  const std::string& path() const override { return base_->path(); }
  uint64_t Size() const override { return size_; }
  int64_t ModificationTimeNs() const override { return base_->ModificationTimeNs(); }
  std::string VersionStamp() const override { return base_->VersionStamp(); }
  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override;
  // Every block mapped in order, once all are on disk and held (see MapWhole); else null.
  const std::byte* Map() const override { return whole_.load(std::memory_order_acquire); }
  // Holds and maps the object's blocks when every one is already on disk, so that a file
  // opened over a filled cache maps as a local file does from the start.
  void MapIfWhole() const;
  void ReadMany(std::span<const ReadRange> ranges, const std::string& what) const override;
  int ReadsInFlight() const override { return base_->ReadsInFlight(); }

 private:
  // A part of a caller's range that lies in one block.
  struct Piece {
    uint64_t offset_in_block = 0;
    char* dst = nullptr;
    size_t n = 0;
  };
  using PiecesByBlock = std::map<uint64_t, std::vector<Piece>>;

  uint64_t BlockLength(uint64_t index) const;
  std::string BlockPath(uint64_t index) const;
  // Reads the pieces from block `index` on disk (the caller holds its lock), checking the
  // block against its trailer the first time this process reads it. False when the block is
  // absent or not whole; one not whole is removed when the caller holds its write lock (so
  // that of all the readers that meet it, one reports it).
  bool ServeFromDisk(uint64_t index, const std::vector<Piece>& pieces, bool write_locked) const;
  // The open block file `fd` (`st`) checked whole, as ServeFromDisk's first read of it;
  // `pieces` filled from it on the way. False when it is not whole.
  bool CheckBlock(uint64_t index, int fd, const struct stat& st, const std::vector<Piece>& pieces,
                  BlockCheck* check) const;
  // Removes a block that is not whole (its write lock held): a damaged one with a warning
  // naming the file, the object and what is wrong, one of another layout quietly.
  void Discard(uint64_t index, const struct stat& st, const BlockCheck& check) const;
  // Fetches `blocks` (whose write locks `lock_fd` holds) from the base file, keeps them on
  // disk where they fit, fills their pieces and releases their locks.
  void Fetch(int lock_fd, std::span<const uint64_t> blocks, const PiecesByBlock& pieces,
             const std::string& what) const;
  void FetchBatch(int lock_fd, std::span<const uint64_t> blocks, const PiecesByBlock& pieces,
                  const std::string& what) const;
  // Keeps a descriptor of block `index` (whole on disk, read just now), so later reads of it
  // skip the lock file: a block is never rewritten, and one evicted while held still reads
  // its bytes (its disk space comes back when this file closes).
  void Hold(uint64_t index, int fd) const;
  // Once every block is held: maps them, in order, into one read-only range (`whole_`), so
  // reads are copies from the page cache as a local file's are. A block evicted meanwhile
  // keeps its bytes in the mapping; blocks are never rewritten in place.
  void MapWhole() const;
  // Serves the pieces of held blocks and removes them from `pieces`; true when none is left.
  bool ServeHeld(PiecesByBlock& pieces) const;
  // Writes the fetched bytes and their trailers to the reserved temporaries, flushes them to
  // the disk and renames them into place.
  void Publish(std::span<BlockTemp> temps, const std::vector<char*>& data) const;

  std::unique_ptr<File> base_;
  std::shared_ptr<const DiskCacheStore> store_;
  const int object_fd_;
  const std::string object_path_;
  const uint64_t block_bytes_;
  const uint64_t size_;
  const uint64_t blocks_;  // blocks of block_bytes_ that cover the object
  mutable std::shared_mutex held_mu_;
  mutable std::map<uint64_t, int> held_;  // block index -> descriptor, at most kMaxHeldBlocks
  mutable std::atomic<const std::byte*> whole_{nullptr};  // every block mapped, in order
};

}  // namespace gpufeed
