// The calling user's own folder for shared-memory caches, under a shared root (/dev/shm).
//
// The root is world-writable, so nothing in it is trusted: each user's caches live in
// <root>/gpufeed-user-<uid>, created 0700 and checked on every open (a directory, not a
// symlink, owned by this user, no group or other permissions); every file in it is opened
// relative to the folder's descriptor with O_NOFOLLOW | O_NONBLOCK and checked with fstat to
// be a regular file of this user with no group or other permissions before it is used, so a
// planted symlink, FIFO or another user's file is refused, never followed, blocked on or
// mapped. The folder also holds the user's secret (the key of the cache headers' checksum),
// made once from getrandom.
//
// Sharing between users is an explicit choice of a group (CacheOptions::shm_group): the
// caches then live in <root>/gpufeed-group-<gid>, mode 2770 and of that group, every file of
// the group with no permissions for others and no write permission for the group (only its
// maker writes it; members read it and take its locks), and the secret is the group's. The
// members of the group trust each other's caches; nobody else can read, plant or squat them.
// Thread-safety: a ShmUserDir is immutable after Open; its methods may be called from many
// threads.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "core/io/fd_io.h"  // ReadAll, WriteAll: how its files are read and written

namespace gpufeed {

inline constexpr size_t kShmSecretBytes = 192;  // XXH3 wants at least 136 bytes of secret

class ShmUserDir {
 public:
  // Opens (with `create`, first makes) the user's folder under `root`. Throws Error(kNotFound)
  // when `root` does not exist (or, without `create`, the folder does not), Error(kIo) naming
  // the folder when it is not a directory of this user with mode 0700 (planted by someone
  // else) or cannot be made. Loads the user's secret, making it when absent.
  // With `group`, the group's folder instead (see above): Error(kIo) when it is not a folder
  // of that group with mode 2770.
  static std::shared_ptr<const ShmUserDir> Open(const std::string& root, bool create,
                                                std::optional<gid_t> group = std::nullopt);
  ~ShmUserDir();
  ShmUserDir(const ShmUserDir&) = delete;
  ShmUserDir& operator=(const ShmUserDir&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  const std::array<std::byte, kShmSecretBytes>& secret() const { return secret_; }

  // What OpenFile found at a name.
  enum class FileState {
    kOpened,   // a file that passed the checks
    kAbsent,   // nothing there (ENOENT)
    kRefused,  // something there that cannot be opened or fails the checks
  };
  // Opens `name` in the folder with `flags` (plus O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC; with
  // O_CREAT the mode is FileMode()) and checks it is a regular file of this user with no group
  // or other permissions (in a group's folder: of the group, no permission for others, not
  // writable by the group). Returns the descriptor, or -1 with `*why` saying what was wrong
  // ("absent" when nothing is there) and, when given, `*state` whether anything was there. The
  // returned descriptor is blocking again. O_NOATIME in `flags` is dropped where the kernel
  // refuses it (a file of another member of the group).
  int OpenFile(const std::string& name, int flags, std::string* why,
               FileState* state = nullptr) const;
  std::string PathOf(const std::string& name) const { return path_ + "/" + name; }
  // Creates `name` exclusively (O_EXCL, nothing followed) for reading and writing, with
  // FileMode() and (in a group's folder) the group. Returns -1 with errno set on failure.
  int CreateFile(const std::string& name) const;
  // 0600, or 0640 in a group's folder.
  mode_t FileMode() const { return group_ ? 0640 : 0600; }
  const std::optional<gid_t>& group() const { return group_; }

 private:
  ShmUserDir(std::string path, int fd, std::optional<gid_t> group)
      : path_(std::move(path)), fd_(fd), group_(group) {}
  void LoadSecret();
  // Gives a file this process just made the folder's mode and group (umask may have cut it).
  void Adopt(int fd) const;

  std::string path_;
  int fd_ = -1;
  std::optional<gid_t> group_;
  std::array<std::byte, kShmSecretBytes> secret_{};
};

// "<root>/gpufeed-user-<uid>" for the calling user, or "<root>/gpufeed-group-<gid>".
std::string ShmUserDirPath(const std::string& root, std::optional<gid_t> group = std::nullopt);

// The group named `name` (a group name or a numeric id) for sharing caches. Throws
// Error(kInvalidArgument) when there is no such group or the calling user is not in it (root
// may name any group).
gid_t ResolveShmGroup(const std::string& name);

}  // namespace gpufeed
