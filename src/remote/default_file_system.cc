// DefaultFileSystem: the one place that decides which file system serves a path.
#include <mutex>

#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/disk_cache.h"

namespace gpufeed {
namespace {

std::mutex disk_mu;
// The node-local disk cache in front of the remote file system, once asked for.
std::shared_ptr<const FileSystem>& DiskSlot() {
  static auto* fs = new std::shared_ptr<const FileSystem>();  // outlives static destruction
  return *fs;
}

std::shared_ptr<const FileSystem> RemoteFor() {
  {
    std::lock_guard lock(disk_mu);
    if (const auto& disk = DiskSlot()) return disk;
  }
  return DefaultRemoteFileSystem();
}

// Sends URIs to the process's remote file system (looked up per call, so that
// SetDefaultRemoteOptions reaches files opened later) and every other path to POSIX.
class DispatchingFileSystem final : public FileSystem {
 public:
  std::unique_ptr<File> Open(const std::string& path) const override {
    return For(path)->Open(path);
  }
  PathType Type(const std::string& path) const override { return For(path)->Type(path); }
  std::vector<DirEntry> List(const std::string& path) const override {
    return For(path)->List(path);
  }
  std::string WhyMissing(const std::string& path) const override {
    return For(path)->WhyMissing(path);
  }

 private:
  static std::shared_ptr<const FileSystem> For(const std::string& path) {
    return IsRemoteUri(path) ? RemoteFor() : PosixFileSystem();
  }
};

}  // namespace

std::shared_ptr<const FileSystem> DefaultFileSystem() {
  static const auto* fs =
      new std::shared_ptr<const FileSystem>(std::make_shared<DispatchingFileSystem>());
  return *fs;
}

void UseRemoteDiskCache(const DiskCacheOptions& options) {
  auto disk = RemoteDiskCache(DefaultRemoteFileSystem(), options);
  std::lock_guard lock(disk_mu);
  DiskSlot() = std::move(disk);
}

std::string RemoteDiskCacheDir() {
  std::lock_guard lock(disk_mu);
  const auto* disk = dynamic_cast<const DiskCacheFileSystem*>(DiskSlot().get());
  return disk != nullptr ? disk->dir() : std::string();
}

}  // namespace gpufeed
