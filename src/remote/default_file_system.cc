// The remote file system DefaultFileSystem() sends URIs to: the process's remote file system,
// or the node-local disk cache in front of it once UseRemoteDiskCache asked for one.
#include <mutex>

#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/disk/disk_cache.h"
#include "remote/process_file_system.h"

namespace gpufeed {
namespace {

std::mutex disk_mu;
// The node-local disk cache in front of the remote file system, once asked for.
std::shared_ptr<const FileSystem>& DiskSlot() {
  static auto* fs = new std::shared_ptr<const FileSystem>();  // outlives static destruction
  return *fs;
}

}  // namespace

std::shared_ptr<const FileSystem> remote::ProcessFileSystem() {
  {
    std::lock_guard lock(disk_mu);
    if (const auto& disk = DiskSlot()) return disk;
  }
  return DefaultRemoteFileSystem();
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
