// WriteNpy: one field's samples as a `.npy` file, written whole and renamed into place.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <system_error>

#include "core/io/fd_io.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_header.h"

namespace gpufeed {

void WriteNpy(const std::string& path, const FieldSpec& field, int64_t samples, const void* data) {
  if (samples < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: cannot write {} samples", path, samples));
  }
  std::vector<int64_t> shape{samples};
  for (int64_t d : field.shape) {
    if (d < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: field {} has a negative dimension", path, field.ToString()));
    }
    shape.push_back(d);
  }
  const std::string header = FormatNpyHeader(field.dtype, shape);
  const size_t bytes = static_cast<size_t>(samples) * field.SampleBytes();
  if (bytes > 0 && data == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: no data for {} samples of {}", path, samples, field.ToString()));
  }
  // A unique temporary name in the same folder, renamed over `path` when complete, so a
  // reader never sees a half-written file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, getpid(), counter.fetch_add(1));
  int fd;
  do {
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    throw Error(ErrorCode::kIo, fmt::format("{}: cannot create {}: {}", path, tmp,
                                            std::generic_category().message(errno)));
  }
  bool ok = WriteAll(fd, header.data(), header.size()) && WriteAll(fd, data, bytes);
  int err = ok ? 0 : errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp.c_str());
    throw Error(ErrorCode::kIo,
                fmt::format("{}: cannot write: {}", path, std::generic_category().message(err)));
  }
}

}  // namespace gpufeed
