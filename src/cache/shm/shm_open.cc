#include "cache/shm/shm_open.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "cache/shm/flock_holders.h"
#include "cache/shm/shm_source.h"
#include "cache/shm/shm_user_dir.h"
#include "core/format.h"
#include "core/io/fd_io.h"
#include "core/log.h"
#include "gpufeed/cache.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "gpufeed/shm_caches.h"

namespace gpufeed {
namespace {

// "process 1234 (python3)", or "another process" when /proc/locks does not say.
std::string DescribeHolder(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "another process";
  const auto holders = FlockHolders(st.st_dev, st.st_ino);
  if (!holders) return "another process";
  for (const FlockHolder& h : *holders) {
    if (!h.exclusive) continue;
    std::string comm;
    if (FILE* f = std::fopen(fmt::format("/proc/{}/comm", h.pid).c_str(), "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof(buf), f) != nullptr) comm = buf;
      std::fclose(f);
      while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    }
    return comm.empty() ? fmt::format("process {}", h.pid)
                        : fmt::format("process {} ({})", h.pid, comm);
  }
  return "another process";
}

// Holds the key's build lock; released (and the descriptor closed) on destruction. The lock
// file is checked like every file of the folder; the wait is bounded (a process that holds
// the lock forever must not stall training forever) and ends with Error(kCancelled) when the
// calling thread's CancelToken is cancelled.
class BuildLock {
 public:
  BuildLock(const ShmUserDir& dir, const std::string& name, bool verbose,
            const std::string& cache_path, double timeout_s,
            const std::function<void()>& while_waiting) {
    std::string why;
    fd_ = dir.OpenFile(name, O_RDONLY | O_CREAT, &why);  // flock needs no write access
    if (fd_ < 0) {
      throw Error(ErrorCode::kIo,
                  fmt::format("the cache lock {} is refused: {}", dir.PathOf(name), why));
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      held_ = true;
      return;
    }
    holder_ = DescribeHolder(fd_);
    if (verbose) {
      Log(LogLevel::kInfo,
          fmt::format("cache: waiting for {}, which is building {}", holder_, cache_path));
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
    while (true) {
      if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        held_ = true;
        return;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int err = errno;
        close(fd_);
        fd_ = -1;
        throw Error(ErrorCode::kIo,
                    fmt::format("cannot lock {}: {}", dir.PathOf(name), std::strerror(err)));
      }
      if (std::chrono::steady_clock::now() >= deadline) return;
      if (CancelRequested()) {
        close(fd_);
        fd_ = -1;
        ThrowIfCancelled(fmt::format("waiting for {} to build {}", holder_, cache_path));
      }
      if (while_waiting) while_waiting();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~BuildLock() {
    if (fd_ >= 0) close(fd_);  // closing releases the flock
  }
  BuildLock(const BuildLock&) = delete;
  BuildLock& operator=(const BuildLock&) = delete;

  bool held() const { return held_; }
  const std::string& holder() const { return holder_; }

 private:
  int fd_ = -1;
  bool held_ = false;
  std::string holder_;
};

// Opens the published file when it is there and belongs to `base`. Null when absent; sets
// `invalid` (and returns null) when something is there but unusable.
std::shared_ptr<Source> OpenPublished(const std::shared_ptr<Source>& base, const ShmUserDir& dir,
                                      const std::string& name, std::string* invalid) {
  const std::string path = dir.PathOf(name);
  std::string why;
  ShmUserDir::FileState state;
  const int fd = dir.OpenFile(name, O_RDONLY, &why, &state);
  if (fd < 0) {
    if (state != ShmUserDir::FileState::kAbsent) *invalid = why;
    return nullptr;
  }
  ShmHeader header;
  try {
    struct stat st {};
    if (fstat(fd, &st) != 0) throw Error(ErrorCode::kIo, std::strerror(errno));
    const auto size = static_cast<uint64_t>(st.st_size);
    std::vector<std::byte> bytes(kShmFixedHeaderBytes);
    if (size < kShmFixedHeaderBytes || !PreadAll(fd, bytes.data(), bytes.size(), 0)) {
      throw Error(ErrorCode::kCorruptData, fmt::format("{} bytes: too short", size));
    }
    bytes.resize(ShmHeaderBytes(bytes, size, path));
    if (!PreadAll(fd, bytes.data(), bytes.size(), 0)) {
      throw Error(ErrorCode::kCorruptData, "header cannot be read");
    }
    header = DecodeShmHeader(bytes, size, path, dir.secret());
    CheckShmHeaderFor(header, base->schema(), base->size(), base->Identity(), path);
  } catch (const Error& e) {
    close(fd);
    *invalid = e.what();
    return nullptr;
  }
  // Owns (and on failure closes) the descriptor from here.
  return std::make_shared<ShmCachedSource>(base, fd, path, std::move(header));
}

// Removes tmp files of earlier builders of `key`. Only called with the build lock held, so
// their builders are dead. Returns the number removed.
int RemoveLeftovers(const ShmUserDir& dir, const std::string& key, bool verbose) {
  const std::string prefix = fmt::format("gpufeed-{}.tmp-", key);
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (verbose) {
      Log(LogLevel::kInfo, fmt::format("cache: {} was left half-built by process {}, which is "
                                       "gone; removing it and rebuilding",
                                       entry.path().string(), name.substr(prefix.size())));
    }
    unlinkat(dir.fd(), name.c_str(), 0);
    ++removed;
  }
  return removed;
}

}  // namespace

std::string ShmCachePath(const std::string& dir, const std::string& key,
                         std::optional<gid_t> group) {
  return fmt::format("{}/gpufeed-{}", ShmUserDirPath(dir, group), key);
}

std::shared_ptr<Source> OpenPublishedShmCache(std::shared_ptr<Source> base, const std::string& dir,
                                              std::optional<gid_t> group) {
  try {
    const auto folder = ShmUserDir::Open(dir, /*create=*/false, group);
    std::string invalid;
    return OpenPublished(base, *folder, "gpufeed-" + CacheKey(*base), &invalid);
  } catch (const Error&) {
    return nullptr;
  }
}

ShmOpenResult OpenShmCache(std::shared_ptr<Source> base, const ShmOpenOptions& options) {
  GPUFEED_ASSERT(options.threads > 0, "threads > 0");
  const auto dir = ShmUserDir::Open(options.dir, /*create=*/true, options.group);
  ShmOpenResult result;
  result.key = CacheKey(*base);
  const std::string name = "gpufeed-" + result.key;
  result.path = dir->PathOf(name);
  BuildLock lock(*dir, name + ".lock", options.verbose, result.path, options.lock_timeout_s,
                 options.while_waiting);
  if (!lock.held()) {
    result.failure = fmt::format("{} held the cache lock {}.lock for more than {} s", lock.holder(),
                                 result.path, options.lock_timeout_s);
    if (options.verbose) {
      Log(LogLevel::kWarning,
          fmt::format("cache: WARNING: {}; reading from the source without a cache",
                      result.failure));
    }
    return result;
  }

  std::string invalid;
  if (auto source = OpenPublished(base, *dir, name, &invalid)) {
    result.source = std::move(source);
    return result;
  }
  if (!invalid.empty()) {
    if (options.verbose) {
      Log(LogLevel::kInfo,
          fmt::format("cache: removing {} ({}); rebuilding", result.path, invalid));
    }
    unlinkat(dir->fd(), name.c_str(), 0);
  }
  result.removed_leftover = RemoveLeftovers(*dir, result.key, options.verbose) > 0;

  const std::string tmp = fmt::format("{}.tmp-{}", name, getpid());
  ShmBuildOptions build{.threads = options.threads,
                        .verbose = options.verbose,
                        .faults = options.faults,
                        .on_progress = options.on_progress};
  if (options.on_build_start) options.on_build_start();
  ShmBuildResult built = BuildShmFile(*base, *dir, tmp, name, build);
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
  result.source =
      std::make_shared<ShmCachedSource>(base, built.fd, result.path, std::move(built.header));
  DropMappedSourcePages(base->Identity());
  // A new version of the data: older versions' caches that nobody maps any more go now, not
  // at the next `gpufeed cache gc`. Best effort: the new cache is built either way.
  try {
    const std::string group = options.group ? std::to_string(*options.group) : std::string();
    for (const ShmCacheEntry& old : RemoveOlderShmVersions(base->Identity(), options.dir, group)) {
      if (options.verbose) {
        Log(LogLevel::kInfo, fmt::format("cache: removed {} ({}), the cache of an older version "
                                         "of the same files",
                                         old.path, FormatBytes(static_cast<double>(old.bytes))));
      }
    }
  } catch (const Error&) {
  }
  return result;
}

}  // namespace gpufeed
