#include "remote/disk/disk_cache.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>

#include "gpufeed/error.h"
#include "remote/disk/disk_cache_file.h"
#include "remote/disk/disk_cache_layout.h"
#include "remote/disk/disk_cache_store.h"

namespace gpufeed {
namespace {

constexpr uint64_t kMinBlockBytes = uint64_t{4} << 10;
constexpr uint64_t kMaxBlockBytes = uint64_t{1} << 30;

// The folder name of one version of one object: every field that tells versions apart, and
// the block size (two block sizes never share blocks).
std::string ObjectKey(const File& file, uint64_t block_bytes) {
  const std::string text = fmt::format("{}\n{}\n{}\n{}\n{}", file.path(), file.Size(),
                                       file.VersionStamp(), file.ModificationTimeNs(), block_bytes);
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

uint64_t DefaultBudget(const std::string& dir) {
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) return 0;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / 2;
}

}  // namespace

std::string DefaultDiskCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/gpufeed/remote";
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    throw Error(ErrorCode::kInvalidArgument,
                "disk cache: neither $XDG_CACHE_HOME nor $HOME is set; name the cache folder "
                "(DiskCacheOptions::dir)");
  }
  return std::string(home) + "/.cache/gpufeed/remote";
}

DiskCacheFileSystem::DiskCacheFileSystem(std::shared_ptr<const FileSystem> base,
                                         DiskCacheOptions options)
    : base_(std::move(base)), block_bytes_(options.block_bytes) {
  if (block_bytes_ < kMinBlockBytes || block_bytes_ > kMaxBlockBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("disk cache: block_bytes {} is out of range ({} to {})", block_bytes_,
                            kMinBlockBytes, kMaxBlockBytes));
  }
  if (options.dir.empty()) options.dir = DefaultDiskCacheDir();
  // The folder first: the default budget is measured on its file system.
  const int dir_fd = OpenOwnedDir(options.dir);
  close(dir_fd);
  const bool chosen = options.budget_bytes == 0;
  const uint64_t budget = chosen ? DefaultBudget(options.dir) : options.budget_bytes;
  if (budget < BlockFileBytes(block_bytes_)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("disk cache budget of {} bytes{} in {} cannot hold one block of {} "
                            "bytes and its {}-byte trailer: raise budget_bytes to at least {} "
                            "(or lower block_bytes)",
                            budget, chosen ? " (half the free space)" : "", options.dir,
                            block_bytes_, kBlockTrailerBytes, BlockFileBytes(block_bytes_)));
  }
  store_ = std::make_shared<const DiskCacheStore>(options.dir, budget);
}

DiskCacheFileSystem::~DiskCacheFileSystem() = default;

const std::string& DiskCacheFileSystem::dir() const { return store_->dir(); }
uint64_t DiskCacheFileSystem::budget_bytes() const { return store_->budget_bytes(); }

std::unique_ptr<File> DiskCacheFileSystem::Open(const std::string& path) const {
  std::unique_ptr<File> file = base_->Open(path);
  if (file->VersionStamp().empty() && file->ModificationTimeNs() == 0) return file;
  const std::string key = ObjectKey(*file, block_bytes_);
  const int object_fd = store_->OpenObjectDir(key, {file->Size(), block_bytes_, file->path()});
  auto cached = std::make_unique<DiskCachedFile>(std::move(file), store_, object_fd,
                                                 store_->dir() + "/" + key, block_bytes_);
  cached->MapIfWhole();
  return cached;
}

DiskCacheStats DiskCacheFileSystem::stats() const {
  const DiskCacheCounters& c = store_->counters();
  return {.hits = c.hits.load(),
          .misses = c.misses.load(),
          .bytes_fetched = c.bytes_fetched.load(),
          .bytes_evicted = c.bytes_evicted.load(),
          .waits = c.waits.load(),
          .stale_removed = c.stale_removed.load(),
          .uncached = c.uncached.load(),
          .damaged = c.damaged.load()};
}

uint64_t DiskCacheFileSystem::CollectGarbage() const { return store_->CollectGarbage(); }

std::shared_ptr<const FileSystem> RemoteDiskCache(std::shared_ptr<const FileSystem> base,
                                                  DiskCacheOptions options) {
  return std::make_shared<DiskCacheFileSystem>(std::move(base), std::move(options));
}

}  // namespace gpufeed
