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
// Sharing caches between users is not offered: each user builds their own copy.
// Thread-safety: a ShmUserDir is immutable after Open; its methods may be called from many
// threads.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

namespace gpufeed {

inline constexpr size_t kShmSecretBytes = 192;  // XXH3 wants at least 136 bytes of secret

class ShmUserDir {
 public:
  // Opens (with `create`, first makes) the user's folder under `root`. Throws Error(kNotFound)
  // when `root` does not exist (or, without `create`, the folder does not), Error(kIo) naming
  // the folder when it is not a directory of this user with mode 0700 (planted by someone
  // else) or cannot be made. Loads the user's secret, making it when absent.
  static std::shared_ptr<const ShmUserDir> Open(const std::string& root, bool create);
  ~ShmUserDir();
  ShmUserDir(const ShmUserDir&) = delete;
  ShmUserDir& operator=(const ShmUserDir&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  const std::array<std::byte, kShmSecretBytes>& secret() const { return secret_; }

  // Opens `name` in the folder with `flags` (plus O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC; with
  // O_CREAT the mode is 0600) and checks it is a regular file of this user with no group or
  // other permissions. Returns the descriptor, or -1 with `*why` saying what was wrong
  // (ENOENT: "absent"). The returned descriptor is blocking again.
  int OpenFile(const std::string& name, int flags, std::string* why) const;
  std::string PathOf(const std::string& name) const { return path_ + "/" + name; }

 private:
  ShmUserDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void LoadSecret();

  std::string path_;
  int fd_ = -1;
  std::array<std::byte, kShmSecretBytes> secret_{};
};

// "<root>/gpufeed-user-<uid>" for the calling user.
std::string ShmUserDirPath(const std::string& root);

}  // namespace gpufeed
