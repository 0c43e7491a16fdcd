// DefaultFileSystem: the one place that decides which file system serves a path. URIs go to
// the remote file system when this program has one (core/remote_hooks.h); every other path
// to POSIX.
#include <fmt/format.h>

#include "core/io/remote_hooks.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"

namespace gpufeed {
namespace {

RemoteHooks& Hooks() {
  static RemoteHooks hooks;
  return hooks;
}

// Sends URIs to the process's remote file system (looked up per call, so that options set
// later reach files opened later) and every other path to POSIX.
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
    if (!IsRemoteUri(path)) return PosixFileSystem();
    if (!Hooks().file_system) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: a remote URI, but this build of gpufeed has no remote "
                              "support (it was built with -DGPUFEED_WITH_REMOTE=OFF, or the "
                              "program does not link gpufeed_remote)",
                              path));
    }
    return Hooks().file_system();
  }
};

}  // namespace

bool RegisterRemoteHooks(RemoteHooks hooks) {
  Hooks() = std::move(hooks);
  return true;
}

bool IsRemoteUri(std::string_view path) {
  return path.starts_with("s3://") || path.starts_with("http://") || path.starts_with("https://");
}

RemoteStats ProcessRemoteStats() { return Hooks().stats ? Hooks().stats() : RemoteStats{}; }

void UseNodeDiskCache(const std::string& dir, uint64_t budget_bytes) {
  if (!Hooks().use_disk_cache) {
    throw Error(ErrorCode::kUnsupported,
                "the node-local disk cache keeps remote data, but this build of gpufeed has no "
                "remote support (it was built with -DGPUFEED_WITH_REMOTE=OFF, or the program "
                "does not link gpufeed_remote)");
  }
  Hooks().use_disk_cache(dir, budget_bytes);
}

std::string NodeDiskCacheDir() {
  return Hooks().disk_cache_dir ? Hooks().disk_cache_dir() : std::string();
}

std::shared_ptr<const FileSystem> DefaultFileSystem() {
  static const auto* fs =
      new std::shared_ptr<const FileSystem>(std::make_shared<DispatchingFileSystem>());
  return *fs;
}

}  // namespace gpufeed
