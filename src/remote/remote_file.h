// A remote object as a File: ranged GETs pinned to the ETag seen at open, small reads
// served from a per-file page cache, ReadMany's ranges coalesced and all in flight at once.
// Thread-safety: thread-safe.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gpufeed/file.h"
#include "remote/store.h"

namespace gpufeed::remote {

// The last-used pages of one file, so that metadata parsing (HDF5's many reads of a few
// bytes) costs one request per 64 KiB instead of one per read.
class PageCache {
 public:
  static constexpr uint64_t kPageSize = 64 * 1024;
  static constexpr size_t kMaxPages = 64;

  // Copies [offset, offset + n) of page `index` into dst; false when the page is not held.
  bool Copy(uint64_t index, uint64_t offset, void* dst, size_t n);
  void Insert(uint64_t index, std::vector<char> bytes);

 private:
  struct Page {
    uint64_t index;
    std::vector<char> bytes;
  };
  std::mutex mu_;
  std::list<Page> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Page>::iterator> pages_;
};

class RemoteFile final : public File {
 public:
  RemoteFile(std::shared_ptr<const RemoteStore> store, RemoteUri uri, ObjectInfo info);

  const std::string& path() const override { return uri_.uri; }
  uint64_t Size() const override { return info_.size; }
  int64_t ModificationTimeNs() const override;
  std::string VersionStamp() const override;
  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override;
  const std::byte* Map() const override { return nullptr; }
  void ReadMany(std::span<const ReadRange> ranges, const std::string& what) const override;
  int ReadsInFlight() const override { return store_->options().max_requests; }
  // The files of one store are read together: every read of a batch in flight at once, each
  // handed to `on_done` as its answer is complete.
  const void* BatchKey() const override { return store_.get(); }
  void ReadBatch(std::span<const FileRead> reads, const std::string& what,
                 const std::function<void(size_t)>& on_done) const override;

 private:
  // Reads every [offset, offset + length) into its buffer, all in flight at once.
  struct Piece {
    uint64_t offset;
    uint64_t length;
    char* dst;
  };
  void Fetch(std::span<const Piece> pieces) const;
  // The request that reads `length` bytes at `offset` of this object into `dst`.
  HttpRequest RangeRequest(uint64_t offset, uint64_t length, char* dst) const;
  // Raises the error of a failed request for [offset, offset + length).
  [[noreturn]] void RaiseFailed(uint64_t offset, uint64_t length, const HttpResult& result) const;
  size_t ReadSmall(uint64_t offset, void* buf, size_t n) const;

  std::shared_ptr<const RemoteStore> store_;
  RemoteUri uri_;
  ObjectInfo info_;
  std::string url_;
  const Signing* signing_;
  mutable PageCache cache_;
};

}  // namespace gpufeed::remote
