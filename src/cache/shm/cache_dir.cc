// `gpufeed cache ls | rm | gc`: the shared-memory caches in a folder.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <regex>

#include "cache/shm/flock_holders.h"
#include "cache/shm/shm_format.h"
#include "cache/shm/shm_user_dir.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/shm_caches.h"

namespace gpufeed {
namespace {

namespace fs = std::filesystem;

bool IsKey(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Processes holding a flock on the file (`st`): one per open file description that maps it.
int CountFlocks(const struct stat& st) {
  const auto holders = FlockHolders(st.st_dev, st.st_ino);
  return holders ? static_cast<int>(holders->size()) : -1;
}

// True when no process holds the key's build lock (so a tmp file of it is a dead builder's).
bool NoBuilder(const ShmUserDir& dir, const std::string& lock_name) {
  std::string why;
  const int fd = dir.OpenFile(lock_name, O_RDONLY, &why);
  if (fd < 0) return true;
  const bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return free;
}

// A file the identity names ("/abs/path:size:mtime_ns", and "stamp:/abs/path=ino:ctime_ns")
// that is gone or differs now.
bool IdentityStale(const std::string& identity) {
  static const std::regex kFile(R"((/[^|:=\s]+):(\d+):(-?\d+))");
  for (std::sregex_iterator it(identity.begin(), identity.end(), kFile), end; it != end; ++it) {
    struct stat st {};
    if (stat((*it)[1].str().c_str(), &st) != 0) return true;
    const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (std::to_string(st.st_size) != (*it)[2].str() || std::to_string(mtime) != (*it)[3].str()) {
      return true;
    }
  }
  static const std::regex kStamp(R"(stamp:(/[^|=]+)=(\d+):(-?\d+))");
  for (std::sregex_iterator it(identity.begin(), identity.end(), kStamp), end; it != end; ++it) {
    struct stat st {};
    if (stat((*it)[1].str().c_str(), &st) != 0) return true;
    const int64_t ctime = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
    if (std::to_string(st.st_ino) != (*it)[2].str() || std::to_string(ctime) != (*it)[3].str()) {
      return true;
    }
  }
  return false;
}

// What an identity's cache holds, for people: a NumPy folder ("numpy:<dir>|..."), else the
// files it names ("/abs/path:size:mtime"), in order, each once.
std::vector<std::string> SourcesOf(const std::string& identity) {
  static const std::regex kNumpy(R"(^numpy:(/[^|]*))");
  static const std::regex kFile(R"((/[^|:=\s]+):(\d+):(-?\d+))");
  std::smatch m;
  if (std::regex_search(identity, m, kNumpy)) return {m[1].str()};
  std::vector<std::string> files;
  for (std::sregex_iterator it(identity.begin(), identity.end(), kFile), end; it != end; ++it) {
    const std::string file = (*it)[1].str();
    if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  }
  return files;
}

// Seconds since `t`, from the wall clock.
double SecondsSince(const struct timespec& t) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return static_cast<double>(now - (int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec)) / 1e9;
}

// The data files an identity names (its "stamp:" entries), sorted.
std::vector<std::string> StampedFiles(const std::string& identity) {
  static const std::regex kStamp(R"(stamp:(/[^|=]+)=)");
  std::vector<std::string> files;
  for (std::sregex_iterator it(identity.begin(), identity.end(), kStamp), end; it != end; ++it) {
    files.push_back((*it)[1].str());
  }
  std::sort(files.begin(), files.end());
  return files;
}

ShmCacheEntry ReadPublished(const ShmUserDir& dir, const std::string& name,
                            const std::string& key) {
  ShmCacheEntry e;
  e.key = key;
  const std::string path = dir.PathOf(name);
  e.path = path;
  // O_NONBLOCK and the checks of OpenFile: a FIFO or a symlink planted under a cache's name
  // is listed as refused, never opened for reading (which would block) or followed.
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // A file refused or whose header cannot be read still has an age: its last write.
  struct stat link {};
  if (lstat(path.c_str(), &link) == 0) {
    e.age_seconds = static_cast<double>(now - (int64_t{link.st_mtim.tv_sec} * 1'000'000'000 +
                                               link.st_mtim.tv_nsec)) /
                    1e9;
  }
  std::string why;
  // O_NOATIME: listing is no use; the access time says when a process last opened it.
  const int fd = dir.OpenFile(name, O_RDONLY | O_NOATIME, &why);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0) close(fd);
    e.valid = false;
    e.description = fmt::format("(refused: {})", why);
    return e;
  }
  e.bytes = static_cast<uint64_t>(st.st_size);
  e.processes = CountFlocks(st);
  e.idle_seconds = SecondsSince(st.st_atim);  // each open sets it (ShmCachedSource)
  try {
    std::vector<std::byte> bytes(kShmFixedHeaderBytes);
    if (pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      throw Error(ErrorCode::kCorruptData, "too short for a header");
    }
    bytes.resize(ShmHeaderBytes(bytes, e.bytes, path));
    if (pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      throw Error(ErrorCode::kCorruptData, "header cannot be read");
    }
    const ShmHeader h = DecodeShmHeader(bytes, e.bytes, path, dir.secret());
    e.description = h.description;
    e.identity = h.identity;
    e.sources = SourcesOf(h.identity);
    e.age_seconds = static_cast<double>(now - h.created_unix_ns) / 1e9;
    e.stale = IdentityStale(h.identity);
  } catch (const Error& err) {
    e.valid = false;
    e.description = err.what();
  }
  close(fd);
  return e;
}

// The user's cache folder under `root`, or null when it does not exist yet.
std::shared_ptr<const ShmUserDir> OpenUserDir(const std::string& root, const std::string& group) {
  std::optional<gid_t> gid;
  if (!group.empty()) gid = ResolveShmGroup(group);
  if (!fs::exists(fs::symlink_status(ShmUserDirPath(root, gid)))) {
    struct stat st {};
    if (stat(root.c_str(), &st) != 0) {
      throw Error(ErrorCode::kNotFound,
                  fmt::format("shared-memory cache folder {} does not exist", root));
    }
    return nullptr;
  }
  return ShmUserDir::Open(root, /*create=*/false, gid);
}

}  // namespace

std::vector<ShmCacheEntry> ListShmCaches(const std::string& root, const std::string& group) {
  std::map<std::string, ShmCacheEntry> found;  // by file name: sorted output
  const auto user_dir = OpenUserDir(root, group);
  if (!user_dir) return {};
  const ShmUserDir& dir = *user_dir;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir.path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("gpufeed-", 0) != 0) continue;
    const std::string rest = name.substr(8);
    const std::string key = rest.substr(0, 16);
    if (!IsKey(key)) continue;
    const std::string path = entry.path().string();
    if (rest.size() == 16) {
      found[name] = ReadPublished(dir, name, key);
    } else if (rest.rfind(".tmp-", 16) == 16) {
      ShmCacheEntry e;
      e.key = key;
      e.path = path;
      struct stat st {};
      if (fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        e.bytes = static_cast<uint64_t>(st.st_size);
        // The builder sizes the file first and writes it in place: what tmpfs holds of it is
        // what is written so far.
        e.built_share = st.st_size > 0 ? std::min(1.0, static_cast<double>(st.st_blocks) * 512 /
                                                           static_cast<double>(st.st_size))
                                       : 0;
      }
      e.half_built = NoBuilder(dir, fmt::format("gpufeed-{}.lock", key));
      e.valid = false;
      e.description = e.half_built ? fmt::format("(left half-built by process {})", rest.substr(21))
                                   : fmt::format("(being built by process {})", rest.substr(21));
      found[name] = e;
    }
  }
  std::vector<ShmCacheEntry> out;
  for (auto& [name, e] : found) out.push_back(std::move(e));
  return out;
}

bool RemoveShmCache(const std::string& key, const std::string& root, const std::string& group) {
  if (!IsKey(key)) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}' is not a cache key (16 hex digits, see `gpufeed cache ls`)", key));
  }
  bool removed = false;
  std::error_code ec;
  const auto user_dir = OpenUserDir(root, group);
  if (!user_dir) return false;
  const std::string lock = user_dir->PathOf(fmt::format("gpufeed-{}.lock", key));
  const bool no_builder = NoBuilder(*user_dir, fmt::format("gpufeed-{}.lock", key));
  // A build in progress goes too: its builder sees its file unlinked within a few MB and
  // stops without publishing (a detached `gpufeed cache build` then exits).
  for (const auto& e : ListShmCaches(root, group)) {
    if (e.key != key) continue;
    removed |= fs::remove(e.path, ec);
  }
  // The lock file goes only when no builder holds it: removing a held lock would let a new
  // process build beside the one already building.
  if (no_builder) fs::remove(lock, ec);
  return removed;
}

std::vector<ShmCacheEntry> RemoveOlderShmVersions(const std::string& identity,
                                                  const std::string& root,
                                                  const std::string& group) {
  std::vector<ShmCacheEntry> removed;
  const std::vector<std::string> files = StampedFiles(identity);
  if (files.empty()) return removed;
  for (auto& e : ListShmCaches(root, group)) {
    // Only published, stale caches of the same files that no process maps (a known 0: with
    // the holders unknown, keep it).
    if (!e.valid || !e.stale || e.identity == identity || e.processes != 0 ||
        StampedFiles(e.identity) != files) {
      continue;
    }
    if (RemoveShmCache(e.key, root, group)) removed.push_back(std::move(e));
  }
  return removed;
}

std::vector<ShmCacheEntry> CollectShmGarbage(const std::string& root, const std::string& group,
                                             const ShmGcOptions& options,
                                             std::vector<ShmCacheEntry>* held) {
  std::vector<ShmCacheEntry> removed;
  std::error_code ec;
  const auto user_dir = OpenUserDir(root, group);
  if (!user_dir) return removed;
  const std::string dir = user_dir->path();
  std::vector<ShmCacheEntry> kept;  // published, valid, current: candidates for eviction
  for (auto& e : ListShmCaches(root, group)) {
    const bool building = !e.half_built && e.path.find(".tmp-") != std::string::npos;
    if (building) continue;
    const bool garbage = e.half_built || !e.valid || e.stale;
    const bool too_old = options.older_than_s > 0 && e.idle_seconds > options.older_than_s;
    if (!garbage && !too_old) {
      kept.push_back(std::move(e));
    } else if (e.valid && e.processes != 0) {
      // Mapped now (or holders unknown): never evicted. An invalid file is mapped by no one
      // (readers refuse it at open).
      if (held != nullptr) held->push_back(std::move(e));
    } else if (fs::remove(e.path, ec)) {
      removed.push_back(std::move(e));
    }
  }
  if (options.max_bytes > 0) {
    uint64_t total = 0;
    for (const auto& e : kept) total += e.bytes;
    // Least recently used first.
    std::sort(kept.begin(), kept.end(), [](const ShmCacheEntry& a, const ShmCacheEntry& b) {
      return a.idle_seconds > b.idle_seconds;
    });
    for (auto& e : kept) {
      if (total <= options.max_bytes) break;
      if (e.processes != 0) {
        if (held != nullptr) held->push_back(e);
        continue;
      }
      if (fs::remove(e.path, ec)) {
        total -= e.bytes;
        removed.push_back(std::move(e));
      }
    }
  }
  // Lock files of keys with nothing left and no builder.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("gpufeed-", 0) != 0 || name.size() != 8 + 16 + 5 || name.substr(24) != ".lock") {
      continue;
    }
    const std::string published = fmt::format("{}/{}", dir, name.substr(0, 24));
    if (!fs::exists(fs::symlink_status(published, ec)) && NoBuilder(*user_dir, name)) {
      fs::remove(entry.path(), ec);
    }
  }
  return removed;
}

std::vector<ShmCacheEntry> ShmCachesOfSource(const std::string& source, const std::string& root,
                                             const std::string& group) {
  std::error_code ec;
  const auto absolute = fs::absolute(source, ec);
  std::string want = ec ? source : absolute.lexically_normal().string();
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  const auto covers = [&](const std::string& path) {
    return path == want || (path.size() > want.size() && path.rfind(want, 0) == 0 &&
                            (want == "/" || path[want.size()] == '/'));
  };
  std::vector<ShmCacheEntry> out;
  for (auto& e : ListShmCaches(root, group)) {
    if (!e.valid) continue;
    std::vector<std::string> paths = e.sources;
    const std::vector<std::string> stamped = StampedFiles(e.identity);
    paths.insert(paths.end(), stamped.begin(), stamped.end());
    if (std::any_of(paths.begin(), paths.end(), covers)) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace gpufeed
