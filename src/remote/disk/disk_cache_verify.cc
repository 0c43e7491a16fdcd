#include "remote/disk/disk_cache_verify.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "core/text.h"
#include "gpufeed/error.h"
#include "remote/disk/disk_cache_layout.h"
#include "remote/disk/disk_cache_store.h"

namespace gpufeed {
namespace {

constexpr size_t kMaxObjectInfoBytes = 64 << 10;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::optional<ObjectInfo> ReadObjectInfo(int object_fd, const std::string& folder) {
  try {
    const Fd fd(OpenOwnedFileAt(object_fd, kObjectInfoName, O_RDONLY, folder + "/object"));
    if (fd.get() < 0) return std::nullopt;
    std::string text(kMaxObjectInfoBytes, '\0');
    const ssize_t n = pread(fd.get(), text.data(), text.size(), 0);
    if (n <= 0) return std::nullopt;
    text.resize(static_cast<size_t>(n));
    return DecodeObjectInfo(text);
  } catch (const Error&) {
    return std::nullopt;  // refused: the blocks are still checked against their trailers
  }
}

// The block files of an object folder, in block order; counts its temporaries.
std::vector<uint64_t> BlockIndexes(int object_fd, DiskCacheVerifyReport& report) {
  std::vector<uint64_t> indexes;
  for (const std::string& name : ListNames(object_fd)) {
    if (const std::optional<uint64_t> index = ParseNumber<uint64_t>(name)) {
      indexes.push_back(*index);
    } else if (name.find(".tmp.") != std::string::npos) {
      ++report.temporaries;
    }
  }
  std::sort(indexes.begin(), indexes.end());
  return indexes;
}

// Removes a damaged block unless a process holds it or it was replaced since it was checked.
void Remove(const DiskCacheStore& store, int object_fd, const std::string& folder,
            const struct stat& checked, DiskBlockProblem& problem) {
  const std::string lock_path = folder + "/lock";
  const Fd lock(OpenOwnedFileAt(object_fd, "lock", O_RDWR, lock_path));
  if (lock.get() < 0 || !TryLockBlock(lock.get(), problem.index, F_WRLCK, lock_path)) {
    problem.kept_why = "a process is reading or fetching it";
    return;
  }
  struct stat now {};
  const std::string name = std::to_string(problem.index);
  if (fstatat(object_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 ||
      now.st_ino != checked.st_ino) {
    problem.kept_why = "it was replaced while it was checked";
  } else if (store.RemoveBlock(object_fd, problem.index, static_cast<uint64_t>(now.st_size))) {
    problem.removed = true;
  } else {
    problem.kept_why = std::strerror(errno);
  }
  TryLockBlock(lock.get(), problem.index, F_UNLCK, lock_path);
}

void VerifyBlock(const DiskCacheStore& store, int object_fd, const std::string& folder,
                 const std::optional<ObjectInfo>& info, uint64_t index, bool remove_damaged,
                 DiskCacheVerifyReport& report) {
  DiskBlockProblem problem;
  problem.path = fmt::format("{}/{}", folder, index);
  problem.object = info ? info->uri : std::string();
  problem.index = index;
  BlockCheck check;
  struct stat st {};
  try {
    // O_NOATIME: checking is no use of the block.
    const Fd fd(
        OpenOwnedFileAt(object_fd, std::to_string(index), O_RDONLY | O_NOATIME, problem.path));
    if (fd.get() < 0) return;  // evicted since the folder was listed
    if (fstat(fd.get(), &st) != 0) {
      check = {BlockState::kUnreadable, std::strerror(errno)};
    } else if (info && index >= info->blocks()) {
      check = {BlockState::kDamaged, fmt::format("its object has {} blocks (0 to {})",
                                                 info->blocks(), info->blocks() - 1)};
    } else {
      std::optional<uint64_t> payload;
      if (info) payload = info->BlockLength(index);
      check = CheckBlockFile(fd.get(), static_cast<uint64_t>(st.st_size), index, payload, {});
    }
  } catch (const Error& e) {  // refused: another type, owner or mode
    check = {BlockState::kDamaged, e.what()};
    remove_damaged = false;
  }
  ++report.blocks;
  report.bytes += static_cast<uint64_t>(st.st_size);
  if (check.state == BlockState::kWhole) return;
  if (check.state == BlockState::kOtherLayout) {
    ++report.other_layout;
    return;
  }
  problem.what =
      check.state == BlockState::kUnreadable ? "it cannot be read: " + check.what : check.what;
  if (remove_damaged) Remove(store, object_fd, folder, st, problem);
  report.damaged.push_back(std::move(problem));
}

}  // namespace

DiskCacheVerifyReport VerifyDiskCache(const std::string& dir, bool remove_damaged) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    throw Error(ErrorCode::kNotFound, fmt::format("no disk cache in {}", dir));
  }
  // The store checks the folder and keeps the byte count right as blocks are removed.
  const DiskCacheStore store(dir, std::numeric_limits<uint64_t>::max());
  const Fd dir_fd(OpenOwnedDir(dir));
  DiskCacheVerifyReport report;
  report.dir = dir;
  std::vector<std::string> keys = ListNames(dir_fd.get());
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    if (!IsObjectKey(key)) continue;
    const Fd object(
        openat(dir_fd.get(), key.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (object.get() < 0) continue;
    ++report.objects;
    const std::string folder = dir + "/" + key;
    const std::optional<ObjectInfo> info = ReadObjectInfo(object.get(), folder);
    for (const uint64_t index : BlockIndexes(object.get(), report)) {
      VerifyBlock(store, object.get(), folder, info, index, remove_damaged, report);
    }
  }
  return report;
}

}  // namespace gpufeed
