// The seam between DefaultFileSystem() (core) and the remote file system (src/remote, built
// when GPUFEED_WITH_REMOTE is on): the remote part registers how to reach the process's remote
// file system and its figures, from remote/family.cc, compiled into every program that links
// gpufeed_remote. Without it, a URI is refused naming the build option.
// Thread-safety: registration during static initialization; lookups afterwards are read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpufeed/file.h"
#include "gpufeed/remote_stats.h"

namespace gpufeed {

struct RemoteHooks {
  // The file system URIs go to now (the process's remote file system, or the node's disk
  // cache in front of it once asked for).
  std::function<std::shared_ptr<const FileSystem>()> file_system;
  // The process's remote figures.
  std::function<RemoteStats()> stats;
  // Puts the node-local disk cache in `dir` (empty: the default) within `budget_bytes` (0:
  // half the free space there) in front of the process's remote reads from now on.
  std::function<void(const std::string& dir, uint64_t budget_bytes)> use_disk_cache;
  // That disk cache's folder; empty when none was asked for.
  std::function<std::string()> disk_cache_dir;
};

bool RegisterRemoteHooks(RemoteHooks hooks);

// The disk cache through the hooks: UseNodeDiskCache throws Error(kUnsupported) naming
// GPUFEED_WITH_REMOTE in a program without remote support; NodeDiskCacheDir is then empty.
void UseNodeDiskCache(const std::string& dir, uint64_t budget_bytes);
std::string NodeDiskCacheDir();

}  // namespace gpufeed
