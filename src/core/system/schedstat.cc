#include "core/system/schedstat.h"

#include <fcntl.h>
#include <unistd.h>

#include "core/text.h"

namespace gpufeed {

std::optional<int64_t> ParseSchedstatRunqueue(std::string_view text) {
  // Skip the first field (time on the CPU), then read the second.
  size_t at = text.find_first_not_of(' ');
  if (at == std::string_view::npos) return std::nullopt;
  at = text.find(' ', at);
  if (at == std::string_view::npos) return std::nullopt;
  at = text.find_first_not_of(' ', at);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t end = text.find_first_of(" \n", at);
  const std::string_view field =
      text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
  const std::optional<int64_t> ns = ParseNumber<int64_t>(field);
  if (!ns || *ns < 0) return std::nullopt;
  return ns;
}

namespace {

// The calling thread's schedstat file, opened once per thread and read with pread from the
// start each time (about a microsecond); closed when the thread ends.
class ThreadSchedstat {
 public:
  ThreadSchedstat() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~ThreadSchedstat() {
    if (fd_ >= 0) ::close(fd_);
  }
  ThreadSchedstat(const ThreadSchedstat&) = delete;
  ThreadSchedstat& operator=(const ThreadSchedstat&) = delete;

  int64_t RunqueueNs() const {
    if (fd_ < 0) return -1;
    char buf[128];
    const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return -1;
    return ParseSchedstatRunqueue(std::string_view(buf, static_cast<size_t>(n))).value_or(-1);
  }

 private:
  int fd_;
};

}  // namespace

int64_t ThreadRunqueueNs() {
  thread_local const ThreadSchedstat file;
  return file.RunqueueNs();
}

}  // namespace gpufeed
