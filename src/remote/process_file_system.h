// The process's remote file system as DefaultFileSystem() reaches it (core/remote_hooks.h),
// registered by remote/family.cc.
// Thread-safety: both may be called from any thread.
#pragma once

#include <memory>

#include "gpufeed/file.h"
#include "gpufeed/remote_stats.h"

namespace gpufeed::remote {

// The disk cache in front of the process's remote file system when UseRemoteDiskCache asked
// for one, else the process's remote file system (created on first use).
std::shared_ptr<const FileSystem> ProcessFileSystem();

// The figures of the process's remote file system; zero when it was never created.
RemoteStats DefaultFileSystemStats();

}  // namespace gpufeed::remote
