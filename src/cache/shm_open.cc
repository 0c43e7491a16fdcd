#include "cache/shm_open.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cache/shm_source.h"
#include "core/log.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// Holds the key's build lock; released (and the descriptor closed) on destruction.
class BuildLock {
 public:
  BuildLock(const std::string& path, bool verbose, const std::string& cache_path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      throw Error(ErrorCode::kIo, fmt::format("cannot open the cache lock {}: {}", path,
                                              std::strerror(errno)));
    }
    fchmod(fd_, 0666);  // every user's processes share the cache; umask must not stop them
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (verbose) {
      Log(LogLevel::kInfo,
          fmt::format("cache: waiting for another process to build {}", cache_path));
    }
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        close(fd_);
        throw Error(ErrorCode::kIo,
                    fmt::format("cannot lock {}: {}", path, std::strerror(err)));
      }
    }
  }
  ~BuildLock() { close(fd_); }  // closing releases the flock
  BuildLock(const BuildLock&) = delete;
  BuildLock& operator=(const BuildLock&) = delete;

 private:
  int fd_ = -1;
};

bool PreadFully(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// Opens the published file when it is there and belongs to `base`. Null when absent; sets
// `invalid` (and returns null) when it is there but unusable.
std::shared_ptr<Source> OpenPublished(const std::shared_ptr<Source>& base, const std::string& path,
                                      std::string* invalid) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) *invalid = fmt::format("cannot open it: {}", std::strerror(errno));
    return nullptr;
  }
  try {
    struct stat st {};
    if (fstat(fd, &st) != 0) throw Error(ErrorCode::kIo, std::strerror(errno));
    const auto size = static_cast<uint64_t>(st.st_size);
    std::vector<std::byte> bytes(kShmFixedHeaderBytes);
    if (size < kShmFixedHeaderBytes || !PreadFully(fd, bytes.data(), bytes.size(), 0)) {
      throw Error(ErrorCode::kCorruptData, fmt::format("{} bytes: too short", size));
    }
    bytes.resize(ShmHeaderBytes(bytes, size, path));
    if (!PreadFully(fd, bytes.data(), bytes.size(), 0)) {
      throw Error(ErrorCode::kCorruptData, "header cannot be read");
    }
    ShmHeader header = DecodeShmHeader(bytes, size, path);
    if (header.identity != base->Identity() || header.schema_text != base->schema().ToString() ||
        header.layout.samples != base->size()) {
      // Equal keys with different identities: a hash collision, or a tampered file.
      throw Error(ErrorCode::kCorruptData, "it was built for a different source");
    }
    return std::make_shared<ShmCachedSource>(base, fd, path, std::move(header),
                                             /*verified=*/false);
  } catch (const Error& e) {
    close(fd);
    *invalid = e.what();
    return nullptr;
  }
}

// Removes tmp files of earlier builders of `key`. Only called with the build lock held, so
// their builders are dead. Returns the number removed.
int RemoveLeftovers(const std::string& dir, const std::string& key, bool verbose) {
  const std::string prefix = fmt::format("gpufeed-{}.tmp-", key);
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (verbose) {
      Log(LogLevel::kInfo, fmt::format("cache: {} was left half-built by process {}, which is "
                                       "gone; removing it and rebuilding",
                                       entry.path().string(), name.substr(prefix.size())));
    }
    std::filesystem::remove(entry.path(), ec);
    ++removed;
  }
  return removed;
}

}  // namespace

std::string ShmCachePath(const std::string& dir, const std::string& key) {
  return fmt::format("{}/gpufeed-{}", dir, key);
}

ShmOpenResult OpenShmCache(std::shared_ptr<Source> base, const ShmOpenOptions& options) {
  GPUFEED_ASSERT(options.threads > 0, "threads > 0");
  struct stat st {};
  if (stat(options.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(ErrorCode::kNotFound,
                fmt::format("shared-memory cache folder {} does not exist", options.dir));
  }
  ShmOpenResult result;
  result.key = CacheKey(*base);
  result.path = ShmCachePath(options.dir, result.key);
  BuildLock lock(result.path + ".lock", options.verbose, result.path);

  std::string invalid;
  if (auto source = OpenPublished(base, result.path, &invalid)) {
    result.source = std::move(source);
    return result;
  }
  if (!invalid.empty()) {
    if (options.verbose) {
      Log(LogLevel::kInfo, fmt::format("cache: removing {} ({}); rebuilding", result.path, invalid));
    }
    unlink(result.path.c_str());
  }
  result.removed_leftover = RemoveLeftovers(options.dir, result.key, options.verbose) > 0;

  const std::string tmp = fmt::format("{}.tmp-{}", result.path, getpid());
  ShmBuildOptions build{.threads = options.threads, .verbose = options.verbose,
                        .faults = options.faults};
  ShmBuildResult built = BuildShmFile(*base, tmp, result.path, build);
  if (built.status != ShmBuildStatus::kPublished) {
    result.failure = built.message;
    if (options.verbose) {
      Log(LogLevel::kWarning,
          fmt::format("cache: WARNING: cannot build the shared-memory cache ({}); reading from "
                      "the source without a cache",
                      built.message));
    }
    return result;
  }
  result.built = true;
  result.source = std::make_shared<ShmCachedSource>(base, built.fd, result.path,
                                                    std::move(built.header), /*verified=*/true);
  return result;
}

}  // namespace gpufeed
