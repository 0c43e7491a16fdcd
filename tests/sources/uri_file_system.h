// A FileSystem whose paths are URIs: it serves a local folder under a fake object-store root
// ("s3://testbucket/root/..."), so tests prove that a source reads a remote path through the
// file seam alone. Its files never map (as an object store's), count ReadAt and ReadMany
// calls, and read a ReadMany's ranges last to first (a remote file system completes them in
// any order). A local path, or a URI outside the root, is not there: a source that bypassed
// the seam, or handed a URI to the OS, fails.
// Thread-safety: thread-safe (the counters are atomic).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/file.h"

namespace gpufeed::testing {

struct UriCounters {
  std::atomic<int64_t> opens{0};
  std::atomic<int64_t> read_at{0};
  std::atomic<int64_t> read_many{0};
  std::atomic<int64_t> read_many_ranges{0};
  std::atomic<int64_t> lists{0};
};

class UriFile final : public File {
 public:
  UriFile(std::string uri, std::unique_ptr<File> local, std::shared_ptr<UriCounters> counters)
      : uri_(std::move(uri)), local_(std::move(local)), counters_(std::move(counters)) {}

  const std::string& path() const override { return uri_; }
  uint64_t Size() const override { return local_->Size(); }
  int64_t ModificationTimeNs() const override { return local_->ModificationTimeNs(); }
  const std::byte* Map() const override { return nullptr; }
  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    ++counters_->read_at;
    return local_->ReadAt(offset, buf, n);
  }
  void ReadMany(std::span<const ReadRange> ranges, const std::string& what) const override {
    ++counters_->read_many;
    counters_->read_many_ranges += static_cast<int64_t>(ranges.size());
    for (size_t i = ranges.size(); i-- > 0;) {
      ReadFully(*this, ranges[i].offset, ranges[i].buf, ranges[i].n, what);
    }
  }

 private:
  const std::string uri_;
  const std::unique_ptr<File> local_;
  const std::shared_ptr<UriCounters> counters_;
};

class UriFileSystem final : public FileSystem {
 public:
  // Serves `local_root` (a local folder) as `uri_root`.
  explicit UriFileSystem(std::string local_root, std::string uri_root = "s3://testbucket/root")
      : local_root_(std::move(local_root)), uri_root_(std::move(uri_root)) {}

  // `local_root`/`rest` as a URI.
  std::string Uri(const std::string& rest) const { return uri_root_ + "/" + rest; }
  const UriCounters& counters() const { return *counters_; }

  std::unique_ptr<File> Open(const std::string& path) const override {
    ++counters_->opens;
    const std::string local = Local(path);
    if (local.empty()) {
      throw Error(ErrorCode::kNotFound, path + ": no such object (outside the test's bucket)");
    }
    return std::make_unique<UriFile>(path, PosixFileSystem()->Open(local), counters_);
  }
  PathType Type(const std::string& path) const override {
    const std::string local = Local(path);
    return local.empty() ? PathType::kMissing : PosixFileSystem()->Type(local);
  }
  std::vector<DirEntry> List(const std::string& path) const override {
    ++counters_->lists;
    const std::string local = Local(path);
    if (local.empty()) throw Error(ErrorCode::kNotFound, path + ": no such prefix");
    return PosixFileSystem()->List(local);
  }

 private:
  // The local path a URI under the root names, or "" for any other path.
  std::string Local(const std::string& path) const {
    if (path == uri_root_) return local_root_;
    if (!path.starts_with(uri_root_ + "/")) return "";
    return local_root_ + path.substr(uri_root_.size());
  }

  const std::string local_root_;
  const std::string uri_root_;
  const std::shared_ptr<UriCounters> counters_ = std::make_shared<UriCounters>();
};

}  // namespace gpufeed::testing
