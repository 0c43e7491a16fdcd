// DefaultFileSystem: the one place that decides which file system serves a path.
#include "gpufeed/file.h"
#include "gpufeed/remote.h"

namespace gpufeed {
namespace {

// Sends URIs to the process's remote file system (looked up per call, so that
// SetDefaultRemoteOptions reaches files opened later) and every other path to POSIX.
class DispatchingFileSystem final : public FileSystem {
 public:
  std::unique_ptr<File> Open(const std::string& path) const override {
    return For(path).Open(path);
  }
  PathType Type(const std::string& path) const override { return For(path).Type(path); }
  std::vector<DirEntry> List(const std::string& path) const override {
    return For(path).List(path);
  }

 private:
  static const FileSystem& For(const std::string& path) {
    if (IsRemoteUri(path)) return *DefaultRemoteFileSystem();  // lives for the program
    return *PosixFileSystem();
  }
};

}  // namespace

std::shared_ptr<const FileSystem> DefaultFileSystem() {
  static const auto* fs =
      new std::shared_ptr<const FileSystem>(std::make_shared<DispatchingFileSystem>());
  return *fs;
}

}  // namespace gpufeed
