// The POSIX file seam: open with O_CLOEXEC, pread with EINTR retry, fstat, lazy read-only mmap.
#include "gpufeed/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <system_error>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

std::string ErrnoText(int err) { return std::generic_category().message(err); }

// One Linux pread moves at most ~2 GiB; larger requests are split by the loop in ReadAt.
constexpr size_t kMaxReadChunk = size_t{1} << 30;

// The pointer Map() hands out for an empty file: mmap refuses length 0, and a non-null
// pointer keeps "nullptr = no mapping, use ReadAt" unambiguous for callers.
const std::byte kEmptyMapping[1] = {};

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, uint64_t size, int64_t mtime_ns, std::string stamp)
      : path_(std::move(path)),
        fd_(fd),
        size_(size),
        mtime_ns_(mtime_ns),
        stamp_(std::move(stamp)) {}

  ~PosixFile() override {
    if (map_ != nullptr && map_ != kEmptyMapping) munmap(const_cast<std::byte*>(map_), size_);
    close(fd_);
  }

  const std::string& path() const override { return path_; }
  uint64_t Size() const override { return size_; }
  int64_t ModificationTimeNs() const override { return mtime_ns_; }
  std::string VersionStamp() const override { return stamp_; }

  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    auto* dst = static_cast<char*>(buf);
    size_t done = 0;
    while (done < n) {
      const size_t want = std::min(n - done, kMaxReadChunk);
      const ssize_t got = pread(fd_, dst + done, want, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::kIo, fmt::format("{}: read of {} bytes at offset {} failed: {}",
                                                path_, want, offset + done, ErrnoText(errno)));
      }
      if (got == 0) break;  // end of file
      done += static_cast<size_t>(got);
    }
    return done;
  }

  const std::byte* Map() const override {
    std::call_once(map_once_, [this] {
      if (size_ == 0) {
        map_ = kEmptyMapping;
        return;
      }
      void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
      // A file that cannot be mapped (a pipe, some network file systems) is still readable
      // through ReadAt, so a failed mmap is not an error: callers fall back.
      map_ = p == MAP_FAILED ? nullptr : static_cast<const std::byte*>(p);
    });
    return map_;
  }

 private:
  const std::string path_;
  const int fd_;
  const uint64_t size_;
  const int64_t mtime_ns_;
  const std::string stamp_;  // VersionStamp
  // Written once inside call_once, which orders that write before every return of Map().
  mutable std::once_flag map_once_;
  mutable const std::byte* map_ = nullptr;
};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<File> Open(const std::string& path) const override {
    int fd;
    do {
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        throw Error(ErrorCode::kNotFound, fmt::format("{}: no such file", path));
      }
      throw Error(ErrorCode::kIo, fmt::format("{}: cannot open: {}", path, ErrnoText(err)));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      throw Error(ErrorCode::kIo, fmt::format("{}: cannot stat: {}", path, ErrnoText(err)));
    }
    if (S_ISDIR(st.st_mode)) {
      close(fd);
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: is a folder, expected a file", path));
    }
    const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    const int64_t ctime_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
    return std::make_unique<PosixFile>(path, fd, static_cast<uint64_t>(st.st_size), mtime_ns,
                                       fmt::format("{}:{}", st.st_ino, ctime_ns));
  }
};

}  // namespace

std::shared_ptr<const FileSystem> DefaultFileSystem() {
  static const std::shared_ptr<const FileSystem> fs = std::make_shared<PosixFileSystem>();
  return fs;
}

void ReadFully(const File& file, uint64_t offset, void* buf, size_t n, const std::string& what) {
  auto* dst = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const size_t got = file.ReadAt(offset + done, dst + done, n - done);
    if (got == 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: {}: file ends at byte {} but {} bytes were expected at "
                              "offset {} (file size {})",
                              file.path(), what, offset + done, n, offset, file.Size()));
    }
    done += got;
  }
}

}  // namespace gpufeed
