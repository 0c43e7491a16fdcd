#include "remote/disk/disk_cache_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "core/io/fd_io.h"
#include "core/io/private_file.h"
#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr char kUsageName[] = "usage";
constexpr char kLockName[] = "lock";

[[noreturn]] void ThrowIo(const std::string& what, const std::string& path, int err) {
  throw Error(ErrorCode::kIo, fmt::format("disk cache: {} {}: {}", what, path, std::strerror(err)));
}

void CheckDirFd(int fd, const std::string& path) {
  struct stat st {};
  const std::string why =
      fstat(fd, &st) != 0 ? std::strerror(errno) : NotPrivate(st, /*want_dir=*/true);
  if (!why.empty()) {
    close(fd);
    throw Error(ErrorCode::kIo,
                fmt::format("disk cache folder {} is refused: {}; it must be this user's own "
                            "folder with mode 0700: remove it",
                            path, why));
  }
}

// The block index a name in an object folder stands for, and whether it is a temporary.
std::optional<uint64_t> BlockOfName(std::string_view name, bool* temp) {
  const size_t dot = name.find('.');
  *temp = dot != std::string_view::npos;
  if (*temp && name.substr(dot, 5) != ".tmp.") return std::nullopt;
  return ParseNumber<uint64_t>(name.substr(0, dot));
}

struct flock BlockLock(uint64_t index, short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(index);
  fl.l_len = 1;
  return fl;
}

// The object's description, written whole or not at all: an unnamed file (O_TMPFILE) linked
// in under its name once written, so a killed writer leaves nothing behind and two writers of
// the same object (the same text) leave one. Where the file system cannot, there is none:
// only `gpufeed cache verify --disk` reads it.
void WriteObjectInfo(int object_fd, const ObjectInfo& info) {
  const int fd = openat(object_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = EncodeObjectInfo(info);
  if (WriteAll(fd, text.data(), text.size()) && fdatasync(fd) == 0) {
    const std::string self = fmt::format("/proc/self/fd/{}", fd);
    (void)linkat(AT_FDCWD, self.c_str(), object_fd, kObjectInfoName, AT_SYMLINK_FOLLOW);
  }
  close(fd);
}

// One block seen by the scan, a candidate for eviction.
struct ScannedBlock {
  int64_t mtime_ns = 0;
  std::string key;
  uint64_t index = 0;
  uint64_t bytes = 0;
};

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

std::vector<std::string> ListNames(int dir_fd) {
  std::vector<std::string> names;
  const int fd = dup(dir_fd);
  if (fd < 0) return names;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return names;
  }
  rewinddir(d);
  while (const dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  return names;
}

bool IsObjectKey(std::string_view name) {
  return name.size() == 32 &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isxdigit(c) != 0; });
}

bool TryLockBlock(int fd, uint64_t index, short type, const std::string& path) {
  struct flock fl = BlockLock(index, type);
  if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  ThrowIo("cannot lock a block of", path, errno);
}

void WaitLockBlock(int fd, uint64_t index, short type, const std::string& path) {
  struct flock fl = BlockLock(index, type);
  while (fcntl(fd, F_OFD_SETLKW, &fl) != 0) {
    if (errno != EINTR) ThrowIo("cannot lock a block of", path, errno);
  }
}

int OpenOwnedDir(const std::string& path) {
  // Parents first, each made 0700 when absent (as the XDG base directory spec asks).
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    mkdir(path.substr(0, slash).c_str(), 0700);
  }
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    ThrowIo("cannot make the folder", path, errno);
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) ThrowIo("cannot open the folder (a symlink or not a folder?)", path, errno);
  CheckDirFd(fd, path);
  return fd;
}

int OpenOwnedFileAt(int dir_fd, const std::string& name, int flags, const std::string& display) {
  const int fd = openat(dir_fd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    ThrowIo("cannot open", display, errno);
  }
  struct stat st {};
  const std::string why =
      fstat(fd, &st) != 0 ? std::strerror(errno) : NotPrivate(st, /*want_dir=*/false);
  if (!why.empty()) {
    close(fd);
    throw Error(ErrorCode::kIo,
                fmt::format("disk cache file {} is refused: {}; remove it", display, why));
  }
  return fd;
}

DiskCacheStore::DiskCacheStore(std::string dir, uint64_t budget_bytes)
    : dir_(std::move(dir)), budget_(budget_bytes) {
  dir_fd_ = OpenOwnedDir(dir_);
  usage_fd_ = OpenOwnedFileAt(dir_fd_, kUsageName, O_RDWR | O_CREAT, dir_ + "/" + kUsageName);
}

DiskCacheStore::~DiskCacheStore() {
  close(usage_fd_);
  close(dir_fd_);
}

int DiskCacheStore::OpenObjectDir(const std::string& key, const ObjectInfo& info) const {
  const std::string path = dir_ + "/" + key;
  if (mkdirat(dir_fd_, key.c_str(), 0700) == 0) {
    fsync(dir_fd_);  // the new folder's name on disk before any block in it
  } else if (errno != EEXIST) {
    ThrowIo("cannot make the folder", path, errno);
  }
  const int fd = openat(dir_fd_, key.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) ThrowIo("cannot open the folder (a symlink or not a folder?)", path, errno);
  CheckDirFd(fd, path);
  const int lock = OpenOwnedFileAt(fd, kLockName, O_RDWR | O_CREAT, path + "/" + kLockName);
  close(lock);
  const int described = OpenOwnedFileAt(fd, kObjectInfoName, O_RDONLY, path + "/object");
  if (described >= 0) {
    close(described);
  } else {
    WriteObjectInfo(fd, info);
  }
  return fd;
}

std::optional<uint64_t> DiskCacheStore::ReadUsage() const {
  uint64_t bytes = 0;
  if (pread(usage_fd_, &bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return std::nullopt;  // new, or cut short: counted afresh by a scan
  }
  return bytes;
}

void DiskCacheStore::WriteUsage(uint64_t bytes) const {
  // A failed write leaves a stale count, which only makes the next reservation scan sooner.
  (void)!pwrite(usage_fd_, &bytes, sizeof(bytes), 0);
}

// Under usage_mu_ and the flock: every reservation is visible as a full-length temporary.
uint64_t DiskCacheStore::ScanAndEvict(uint64_t need) const {
  uint64_t total = 0;
  std::vector<ScannedBlock> blocks;
  // key -> (folder fd, lock fd), closed however the scan ends.
  struct Objects : std::map<std::string, std::pair<int, int>> {
    ~Objects() {
      for (const auto& [key, fds] : *this) {
        close(fds.second);
        close(fds.first);
      }
    }
  } objects;
  for (const std::string& key : ListNames(dir_fd_)) {
    if (!IsObjectKey(key)) continue;
    const int obj = openat(dir_fd_, key.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (obj < 0) continue;
    const int lock = openat(obj, kLockName, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (lock < 0) {
      close(obj);
      continue;
    }
    objects[key] = {obj, lock};
    for (const std::string& name : ListNames(obj)) {
      bool temp = false;
      const std::optional<uint64_t> index = BlockOfName(name, &temp);
      struct stat st {};
      if (!index || fstatat(obj, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode)) {
        continue;
      }
      const auto bytes = static_cast<uint64_t>(st.st_size);
      if (temp && TryLockBlock(lock, *index, F_WRLCK, dir_ + "/" + key)) {
        // Nobody writes the block: its downloader was killed.
        if (unlinkat(obj, name.c_str(), 0) == 0) counters_.stale_removed.fetch_add(1);
        TryLockBlock(lock, *index, F_UNLCK, dir_ + "/" + key);
        continue;
      }
      total += bytes;
      if (!temp) blocks.push_back({MtimeNs(st), key, *index, bytes});
    }
  }
  if (total + need > budget_) {
    // Evict past the need by a sixteenth of the budget (whole blocks of the largest size
    // seen), so a full cache scans once per that many bytes written, not once per block.
    uint64_t largest = 0;
    for (const ScannedBlock& b : blocks) largest = std::max(largest, b.bytes);
    const uint64_t slack = largest == 0 ? 0 : budget_ / 16 / largest * largest;
    const uint64_t target = budget_ - std::min(budget_, need + slack);
    std::sort(blocks.begin(), blocks.end(),
              [](const ScannedBlock& a, const ScannedBlock& b) { return a.mtime_ns < b.mtime_ns; });
    for (const ScannedBlock& b : blocks) {
      if (total <= target) break;
      const auto [obj, lock] = objects[b.key];
      const std::string display = dir_ + "/" + b.key;
      if (!TryLockBlock(lock, b.index, F_WRLCK, display)) continue;  // a reader holds it
      const std::string name = std::to_string(b.index);
      struct stat st {};
      // A block read since the scan is no longer the least recently used.
      if (fstatat(obj, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && MtimeNs(st) == b.mtime_ns &&
          unlinkat(obj, name.c_str(), 0) == 0) {
        total -= b.bytes;
        counters_.bytes_evicted.fetch_add(static_cast<int64_t>(b.bytes));
      }
      TryLockBlock(lock, b.index, F_UNLCK, display);
    }
  }
  return total;
}

bool DiskCacheStore::Reserve(int object_fd, std::span<BlockTemp> blocks) const {
  uint64_t need = 0;
  for (const BlockTemp& b : blocks) need += b.file_bytes();
  std::lock_guard<std::mutex> guard(usage_mu_);
  if (flock(usage_fd_, LOCK_EX) != 0) return false;
  std::optional<uint64_t> usage = ReadUsage();
  if (!usage || *usage + need > budget_) usage = ScanAndEvict(need);
  bool ok = *usage + need <= budget_;
  size_t made = 0;  // temporaries created
  while (ok && made < blocks.size()) {
    BlockTemp& b = blocks[made];
    b.temp_name = fmt::format("{}.tmp.{}.{}", b.index, getpid(), temp_counter_.fetch_add(1));
    b.fd = openat(object_fd, b.temp_name.c_str(),
                  O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (b.fd < 0) {
      ok = false;
      break;
    }
    ++made;
    ok = ftruncate(b.fd, static_cast<off_t>(b.file_bytes())) == 0;
  }
  if (!ok) {
    for (size_t i = 0; i < made; ++i) {
      close(blocks[i].fd);
      unlinkat(object_fd, blocks[i].temp_name.c_str(), 0);
      blocks[i].fd = -1;
    }
  }
  WriteUsage(*usage + (ok ? need : 0));
  flock(usage_fd_, LOCK_UN);
  return ok;
}

void DiskCacheStore::Release(int object_fd, std::span<BlockTemp> blocks) const {
  uint64_t freed = 0;
  std::lock_guard<std::mutex> guard(usage_mu_);
  const bool locked = flock(usage_fd_, LOCK_EX) == 0;
  for (BlockTemp& b : blocks) {
    if (b.fd < 0) continue;
    close(b.fd);
    b.fd = -1;
    unlinkat(object_fd, b.temp_name.c_str(), 0);
    freed += b.file_bytes();
  }
  if (!locked) return;  // the count stays high until the next scan
  if (const std::optional<uint64_t> usage = ReadUsage()) {
    WriteUsage(*usage - std::min(*usage, freed));
  }
  flock(usage_fd_, LOCK_UN);
}

bool DiskCacheStore::RemoveBlock(int object_fd, uint64_t index, uint64_t bytes) const {
  std::lock_guard<std::mutex> guard(usage_mu_);
  const bool locked = flock(usage_fd_, LOCK_EX) == 0;
  const bool removed = unlinkat(object_fd, std::to_string(index).c_str(), 0) == 0;
  if (!locked) return removed;  // the count stays high until the next scan
  if (const std::optional<uint64_t> usage = ReadUsage(); usage && removed) {
    WriteUsage(*usage - std::min(*usage, bytes));
  }
  flock(usage_fd_, LOCK_UN);
  return removed;
}

bool DiskCacheStore::Verified(const std::string& block_path, ino_t inode) const {
  std::lock_guard<std::mutex> lock(verified_mu_);
  const auto it = verified_.find(block_path);
  return it != verified_.end() && it->second == inode;
}

void DiskCacheStore::SetVerified(const std::string& block_path, ino_t inode) const {
  std::lock_guard<std::mutex> lock(verified_mu_);
  verified_[block_path] = inode;
}

uint64_t DiskCacheStore::CollectGarbage() const {
  std::lock_guard<std::mutex> guard(usage_mu_);
  if (flock(usage_fd_, LOCK_EX) != 0) ThrowIo("cannot lock", dir_ + "/" + kUsageName, errno);
  const uint64_t total = ScanAndEvict(0);
  WriteUsage(total);
  flock(usage_fd_, LOCK_UN);
  return total;
}

}  // namespace gpufeed
