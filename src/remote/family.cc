// Registers the remote file system with DefaultFileSystem() (core/remote_hooks.h).
#include "core/io/remote_hooks.h"
#include "remote/process_file_system.h"

namespace gpufeed {
namespace {

const bool registered = RegisterRemoteHooks(
    {.file_system = remote::ProcessFileSystem, .stats = remote::DefaultFileSystemStats});

}  // namespace
}  // namespace gpufeed
