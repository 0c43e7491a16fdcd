// Registers the remote file system with DefaultFileSystem() (core/remote_hooks.h).
#include "core/io/remote_hooks.h"
#include "remote/disk/disk_cache.h"
#include "remote/process_file_system.h"

namespace gpufeed {
namespace {

const bool registered = RegisterRemoteHooks(
    {.file_system = remote::ProcessFileSystem,
     .stats = remote::DefaultFileSystemStats,
     .use_disk_cache =
         [](const std::string& dir, uint64_t budget_bytes) {
           DiskCacheOptions options;
           options.dir = dir;
           options.budget_bytes = budget_bytes;
           UseRemoteDiskCache(options);
         },
     .disk_cache_dir = RemoteDiskCacheDir});

}  // namespace
}  // namespace gpufeed
