// DefaultFileSystem: the one place that decides which file system serves a path.
#include "gpufeed/file.h"

namespace gpufeed {

std::shared_ptr<const FileSystem> DefaultFileSystem() { return PosixFileSystem(); }

}  // namespace gpufeed
