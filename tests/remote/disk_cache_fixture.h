// Shared by the disk cache's tests: MemoryObjectStore, an in-memory base file system that
// counts what it serves (and can be slowed down or made to fail), and DiskCacheFixture, a
// cache folder of its own per test over one.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "remote/disk/disk_cache.h"
#include "remote/disk/disk_cache_layout.h"

namespace gpufeed::testing {

inline constexpr uint64_t kBlock = 4096;
inline constexpr uint64_t kBlockFile = BlockFileBytes(kBlock);  // a block's file: + trailer

// Objects in memory with an ETag each; a file pins the ETag at open and refuses reads once
// the object changed, as the remote file system does.
class MemoryObjectStore : public FileSystem {
 public:
  struct Object {
    std::vector<char> bytes;
    std::string etag;
  };
  void Put(const std::string& path, std::vector<char> bytes, const std::string& etag) {
    std::lock_guard<std::mutex> lock(mu_);
    objects_[path] = {std::move(bytes), etag};
  }
  std::unique_ptr<File> Open(const std::string& path) const override;
  PathType Type(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return objects_.count(path) ? PathType::kFile : PathType::kMissing;
  }
  std::vector<DirEntry> List(const std::string&) const override { return {}; }

  mutable std::atomic<int64_t> bytes_read{0};
  mutable std::atomic<int64_t> read_calls{0};  // ReadMany and ReadAt calls
  std::atomic<int> delay_us{0};
  std::atomic<bool> fail{false};

 private:
  friend class MemoryObjectFile;
  mutable std::mutex mu_;
  std::map<std::string, Object> objects_;
};

class MemoryObjectFile : public File {
 public:
  MemoryObjectFile(const MemoryObjectStore* store, std::string path, MemoryObjectStore::Object o)
      : store_(store), path_(std::move(path)), object_(std::move(o)) {}
  const std::string& path() const override { return path_; }
  uint64_t Size() const override { return object_.bytes.size(); }
  std::string VersionStamp() const override { return object_.etag; }
  const std::byte* Map() const override { return nullptr; }
  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    store_->read_calls.fetch_add(1);
    return Serve(offset, buf, n);
  }
  void ReadMany(std::span<const ReadRange> ranges, const std::string& what) const override {
    store_->read_calls.fetch_add(1);
    for (const ReadRange& r : ranges) {
      if (Serve(r.offset, r.buf, r.n) != r.n) {
        throw Error(ErrorCode::kCorruptData, path_ + ": " + what + " past the end");
      }
    }
  }

 private:
  size_t Serve(uint64_t offset, void* buf, size_t n) const {
    if (store_->delay_us.load() > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(store_->delay_us.load()));
    }
    if (store_->fail.load()) throw Error(ErrorCode::kIo, path_ + ": injected failure");
    {
      std::lock_guard<std::mutex> lock(store_->mu_);
      if (store_->objects_.at(path_).etag != object_.etag) {
        throw Error(ErrorCode::kCorruptData, path_ + ": the object changed since it was opened");
      }
    }
    if (offset >= object_.bytes.size()) return 0;
    n = std::min<size_t>(n, object_.bytes.size() - offset);
    std::memcpy(buf, object_.bytes.data() + offset, n);
    store_->bytes_read.fetch_add(static_cast<int64_t>(n));
    return n;
  }
  const MemoryObjectStore* store_;
  std::string path_;
  MemoryObjectStore::Object object_;
};

inline std::unique_ptr<File> MemoryObjectStore::Open(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = objects_.find(path);
  if (it == objects_.end()) throw Error(ErrorCode::kNotFound, path + ": no such object");
  return std::make_unique<MemoryObjectFile>(this, path, it->second);
}

inline std::vector<char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

// A cache folder of its own per test, over a MemoryObjectStore; blocks of kBlock bytes.
class DiskCacheFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/disk_cache_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/cache";
    base_ = std::make_shared<MemoryObjectStore>();
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::shared_ptr<DiskCacheFileSystem> Cache(uint64_t budget = 1 << 30) {
    return std::make_shared<DiskCacheFileSystem>(
        base_, DiskCacheOptions{.dir = dir_, .budget_bytes = budget, .block_bytes = kBlock});
  }
  // The one object folder in the cache.
  std::string ObjectDir() const {
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      if (e.is_directory()) return e.path();
    }
    return {};
  }
  // Bytes of block files and temporaries on disk.
  uint64_t DiskBytes() const {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename();
      if (e.is_regular_file() && name != "lock" && name != "usage" && name != kObjectInfoName) {
        total += e.file_size();
      }
    }
    return total;
  }
  bool HasBlock(uint64_t index) const {
    return std::filesystem::exists(ObjectDir() + "/" + std::to_string(index));
  }
  void SetAge(uint64_t index, int seconds_ago) const {
    const std::string path = ObjectDir() + "/" + std::to_string(index);
    struct timespec times[2] = {};
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= seconds_ago;
    times[1] = times[0];
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  }
  void ReadBlock(const File& f, uint64_t index) const {
    std::vector<char> got(kBlock);
    ASSERT_EQ(f.ReadAt(index * kBlock, got.data(), kBlock), kBlock);
  }

  std::string root_;
  std::string dir_;
  std::shared_ptr<MemoryObjectStore> base_;
};

}  // namespace gpufeed::testing
