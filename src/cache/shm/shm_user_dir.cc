#include "cache/shm/shm_user_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/io/private_file.h"
#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr char kSecretName[] = "secret";

// What is wrong with `st` as a file or folder of `group`'s shared caches, or empty.
std::string UntrustedForGroup(const struct stat& st, bool want_dir, gid_t group) {
  if (st.st_gid != group) {
    return fmt::format("of group {}, not of the cache's group {}", st.st_gid, group);
  }
  if ((st.st_mode & 07) != 0) {
    return fmt::format("mode {:04o}: open to users outside group {}", st.st_mode & 07777, group);
  }
  if (want_dir && (st.st_mode & 070) != 070) {
    return fmt::format("mode {:04o}: group {} cannot use it (a group's cache folder is 2770)",
                       st.st_mode & 07777, group);
  }
  if (!want_dir && (st.st_mode & 020) != 0) {
    return fmt::format(
        "mode {:04o}: writable by the whole group (only its maker may write a "
        "cache file)",
        st.st_mode & 07777);
  }
  return {};
}

// What is wrong with `st` as a file or folder of ours (or of `group`'s), or empty.
std::string Untrusted(const struct stat& st, bool want_dir, std::optional<gid_t> group) {
  if (!group) return NotPrivate(st, want_dir);
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return want_dir ? "not a directory" : "not a regular file";
  }
  return UntrustedForGroup(st, want_dir, *group);
}

}  // namespace

std::string ShmUserDirPath(const std::string& root, std::optional<gid_t> group) {
  if (group) return fmt::format("{}/gpufeed-group-{}", root, *group);
  return fmt::format("{}/gpufeed-user-{}", root, geteuid());
}

gid_t ResolveShmGroup(const std::string& name) {
  gid_t gid = 0;
  if (const auto id = ParseNumber<uint32_t>(name)) {
    gid = static_cast<gid_t>(*id);
  } else {
    std::vector<char> buf(16384);
    struct group grp {};
    struct group* found = nullptr;
    if (getgrnam_r(name.c_str(), &grp, buf.data(), buf.size(), &found) != 0 || !found) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("shm_group '{}': no such group (a group name or a numeric id)", name));
    }
    gid = found->gr_gid;
  }
  if (geteuid() == 0 || getegid() == gid) return gid;
  const int n = getgroups(0, nullptr);
  std::vector<gid_t> groups(static_cast<size_t>(std::max(n, 0)));
  if (n > 0 && getgroups(n, groups.data()) == n) {
    for (const gid_t g : groups) {
      if (g == gid) return gid;
    }
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("shm_group '{}' (gid {}): this user is not a member; caches are shared "
                          "only within a group the user belongs to",
                          name, gid));
}

std::shared_ptr<const ShmUserDir> ShmUserDir::Open(const std::string& root, bool create,
                                                   std::optional<gid_t> group) {
  struct stat root_st {};
  if (stat(root.c_str(), &root_st) != 0 || !S_ISDIR(root_st.st_mode)) {
    throw Error(ErrorCode::kNotFound,
                fmt::format("shared-memory cache folder {} does not exist", root));
  }
  const std::string path = ShmUserDirPath(root, group);
  const bool made = create && mkdir(path.c_str(), 0700) == 0;
  if (create && !made && errno != EEXIST) {
    throw Error(ErrorCode::kIo,
                fmt::format("cannot make the cache folder {}: {}", path, std::strerror(errno)));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      throw Error(ErrorCode::kNotFound, fmt::format("no cache folder {}", path));
    }
    throw Error(ErrorCode::kIo,
                fmt::format("cache folder {} cannot be opened ({}); it is not a folder of yours "
                            "(a symlink or file planted by another user?): remove it",
                            path,
                            err == ELOOP || err == ENOTDIR ? "a symlink or not a folder"
                                                           : std::strerror(err)));
  }
  struct stat st {};
  // A group's folder this call made (0700 until now: nobody else could use it meanwhile) is
  // handed to the group; one another member is making is waited for, briefly, to be handed.
  for (int tries = 0; group && !made && tries < 40; ++tries) {
    if (fstat(fd, &st) != 0 || st.st_uid == geteuid() || (st.st_mode & 07777) != 0700) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (group && made && fstat(fd, &st) == 0 &&
      (st.st_gid != *group || (st.st_mode & 07777) != 02770)) {
    if (fchown(fd, static_cast<uid_t>(-1), *group) != 0 || fchmod(fd, 02770) != 0) {
      const int err = errno;
      close(fd);
      throw Error(ErrorCode::kIo, fmt::format("cannot give the cache folder {} to group {}: {}",
                                              path, *group, std::strerror(err)));
    }
  }
  std::string why =
      fstat(fd, &st) != 0 ? std::strerror(errno) : Untrusted(st, /*want_dir=*/true, group);
  if (!why.empty()) {
    close(fd);
    throw Error(ErrorCode::kIo,
                fmt::format("cache folder {} is refused: {}; a cache folder must be {}: remove it",
                            path, why,
                            group ? fmt::format("of group {} with mode 2770", *group)
                                  : std::string("this user's own with mode 0700")));
  }
  std::shared_ptr<ShmUserDir> dir(new ShmUserDir(path, fd, group));
  dir->LoadSecret();
  return dir;
}

ShmUserDir::~ShmUserDir() { close(fd_); }

void ShmUserDir::Adopt(int fd) const {
  if (!group_) return;  // 0600 already: a umask only takes permissions away
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) return;  // another member's: checked
  if (st.st_gid != *group_) {
    if (fchown(fd, static_cast<uid_t>(-1), *group_) != 0) return;  // then refused by the check
  }
  if ((st.st_mode & 07777) != FileMode()) fchmod(fd, FileMode());
}

int ShmUserDir::CreateFile(const std::string& name) const {
  const int fd =
      openat(fd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, FileMode());
  if (fd >= 0) Adopt(fd);
  return fd;
}

int ShmUserDir::OpenFile(const std::string& name, int flags, std::string* why,
                         FileState* state) const {
  FileState ignored;
  if (state == nullptr) state = &ignored;
  int fd = openat(fd_, name.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, FileMode());
  if (fd < 0 && errno == EPERM && (flags & O_NOATIME) != 0) {
    // O_NOATIME is the owner's: a group member reads the builder's file without it.
    fd = openat(fd_, name.c_str(), (flags & ~O_NOATIME) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                FileMode());
  }
  if (fd < 0) {
    const int err = errno;
    *state = err == ENOENT ? FileState::kAbsent : FileState::kRefused;
    *why = err == ENOENT  ? "absent"
           : err == ELOOP ? "a symlink"
                          : fmt::format("cannot open it: {}", std::strerror(err));
    return -1;
  }
  if ((flags & O_CREAT) != 0) Adopt(fd);
  struct stat st {};
  *why = fstat(fd, &st) != 0 ? std::strerror(errno) : Untrusted(st, /*want_dir=*/false, group_);
  if (!why->empty()) {
    close(fd);
    *state = FileState::kRefused;
    return -1;
  }
  *state = FileState::kOpened;
  // Regular files ignore O_NONBLOCK for reads, but flock waits must block where asked.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void ShmUserDir::LoadSecret() {
  std::string why;
  int fd = OpenFile(kSecretName, O_RDONLY, &why);
  struct stat st {};
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(kShmSecretBytes) &&
      ReadAll(fd, secret_.data(), secret_.size())) {
    close(fd);
    return;
  }
  const bool damaged = fd >= 0;
  if (fd >= 0) close(fd);
  // Absent, or damaged: a new secret under a tmp name of this thread. An absent one is linked
  // into place, so when several threads or processes make one at once the first wins and the
  // others load it below (a rename would let a later one replace a secret already in use); a
  // damaged one is replaced by rename.
  for (size_t got = 0; got < secret_.size();) {
    const ssize_t r = getrandom(secret_.data() + got, secret_.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      throw Error(ErrorCode::kIo, fmt::format("getrandom failed: {}", std::strerror(errno)));
    }
    got += static_cast<size_t>(r);
  }
  const std::string tmp = fmt::format("{}.tmp-{}-{}", kSecretName, getpid(), gettid());
  unlinkat(fd_, tmp.c_str(), 0);
  fd = CreateFile(tmp);
  bool ok = fd >= 0 && WriteAll(fd, secret_.data(), secret_.size());
  int err = ok ? 0 : errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && damaged && renameat(fd_, tmp.c_str(), fd_, kSecretName) != 0) {
    ok = false;
    err = errno;
  }
  if (ok && !damaged && linkat(fd_, tmp.c_str(), fd_, kSecretName, 0) != 0 && errno != EEXIST) {
    ok = false;
    err = errno;
  }
  unlinkat(fd_, tmp.c_str(), 0);  // gone already after a rename; the link's spare name else
  if (!ok) {
    throw Error(ErrorCode::kIo, fmt::format("cannot write the cache secret {}: {}",
                                            PathOf(kSecretName), std::strerror(err)));
  }
  fd = OpenFile(kSecretName, O_RDONLY, &why);
  if (fd < 0 || !ReadAll(fd, secret_.data(), secret_.size())) {
    if (fd >= 0) close(fd);
    throw Error(ErrorCode::kIo,
                fmt::format("cannot read the cache secret {}: {}", PathOf(kSecretName), why));
  }
  close(fd);
}

}  // namespace gpufeed
