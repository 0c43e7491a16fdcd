#include "sources/db/local_copy.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/io/fd_io.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"

namespace gpufeed {

LocalCopy::LocalCopy(const std::string& uri) {
  const std::unique_ptr<File> file = DefaultFileSystem()->Open(uri);
  const char* tmp = std::getenv("TMPDIR");
  std::string name = fmt::format("{}/gpufeed-sqlite-XXXXXX", tmp != nullptr && *tmp ? tmp : "/tmp");
  const int fd = mkostemp(name.data(), O_CLOEXEC);  // 0600
  if (fd < 0) {
    throw Error(ErrorCode::kIo, fmt::format("{}: cannot make a local copy for SQLite in {}: {}",
                                            uri, name, std::strerror(errno)));
  }
  path_ = name;
  try {
    constexpr uint64_t kPiece = uint64_t{16} << 20;
    std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(kPiece, file->Size())));
    for (uint64_t at = 0; at < file->Size(); at += kPiece) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(kPiece, file->Size() - at));
      ReadFully(*file, at, buffer.data(), n, "database file");
      if (!PwriteAll(fd, buffer.data(), n, at)) {
        throw Error(ErrorCode::kIo, fmt::format("{}: cannot write its local copy {}: {}", uri,
                                                path_, std::strerror(errno)));
      }
    }
  } catch (...) {
    close(fd);
    unlink(path_.c_str());
    throw;
  }
  close(fd);
}

LocalCopy::~LocalCopy() { unlink(path_.c_str()); }

}  // namespace gpufeed
