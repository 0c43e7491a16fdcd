// The seam between DefaultFileSystem() (core) and the remote file system (src/remote, built
// when GPUFEED_WITH_REMOTE is on): the remote part registers how to reach the process's remote
// file system and its figures, from remote/family.cc, compiled into every program that links
// gpufeed_remote. Without it, a URI is refused naming the build option.
// Thread-safety: registration during static initialization; lookups afterwards are read-only.
#pragma once

#include <functional>
#include <memory>

#include "gpufeed/file.h"
#include "gpufeed/remote_stats.h"

namespace gpufeed {

struct RemoteHooks {
  // The file system URIs go to now (the process's remote file system, or the node's disk
  // cache in front of it once asked for).
  std::function<std::shared_ptr<const FileSystem>()> file_system;
  // The process's remote figures.
  std::function<RemoteStats()> stats;
};

bool RegisterRemoteHooks(RemoteHooks hooks);

}  // namespace gpufeed
