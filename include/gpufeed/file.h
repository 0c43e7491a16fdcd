// The file seam: every byte gpufeed reads from disk goes through a FileSystem, so tests can
// inject EIO, short reads and delays without touching real files (LevelDB's Env).
//
// Thread-safety: File and FileSystem are thread-safe; ReadAt may be called by many threads
// at once (it is a pread, with no shared file position).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpufeed {

// One range of File::ReadMany: `n` bytes at `offset` into `buf`.
struct ReadRange {
  uint64_t offset = 0;
  void* buf = nullptr;
  size_t n = 0;
};

class File {
 public:
  virtual ~File() = default;

  // The path the file was opened with, for error messages.
  virtual const std::string& path() const = 0;
  virtual uint64_t Size() const = 0;
  // Last modification time in nanoseconds since the epoch, for cache keys (Source::Identity).
  // 0 where the file system does not know it.
  virtual int64_t ModificationTimeNs() const { return 0; }
  // What a rewrite changes even when it keeps the size and restores the mtime: the inode and
  // the status change time (ctime, which no call sets back), as "ino:ctime_ns"; for cache
  // keys. Empty where the file system does not know them.
  virtual std::string VersionStamp() const { return {}; }
  // Reads up to `n` bytes at `offset` into `buf`, like pread: returns the bytes read, which
  // may be fewer than `n` (a short read, or the end of the file). Throws Error(kIo) naming
  // the path and offset when the OS fails the read.
  virtual size_t ReadAt(uint64_t offset, void* buf, size_t n) const = 0;
  // The whole file mapped read-only, or nullptr where mapping is not possible or not wanted
  // (the fault-injecting wrapper returns nullptr so every read goes through ReadAt).
  // The mapping lives as long as the File. The POSIX file maps on the first call (once, even
  // when many threads call at once); an empty file maps to a valid, non-null pointer to no
  // bytes, so nullptr always means "use ReadAt".
  virtual const std::byte* Map() const = 0;
  // Says that [offset, offset + length) will be gathered from Map()'s mapping. The POSIX file
  // maps files of 2 MiB and more at a 2 MiB boundary with MADV_HUGEPAGE (within half the
  // available RAM), so that the page cache's 2 MiB folios map whole; where the range's cached
  // pages are small it drops them once, so that the mapping reads them back in 2 MiB folios
  // for every later process (src/core/file.cc, PromoteToHugeFolios). Never throws; does
  // nothing for a file that is not mapped.
  virtual void PreferHugePages(uint64_t offset, uint64_t length) const {
    (void)offset;
    (void)length;
  }
  // Reads every range whole (ReadFully's contract; `what` names the reads in errors). A
  // remote file has them all in flight at once, so one caller is not bound by the latency of
  // one request; the default reads them one after another.
  virtual void ReadMany(std::span<const ReadRange> ranges, const std::string& what) const;
  // How many reads of this file it pays to keep in flight at once: a remote file's limit of
  // requests per host (each pays a round trip, and the store serves them side by side); 1 for
  // a local file (the kernel reads ahead by itself). A reader that fetches ahead sizes its
  // depth by it.
  virtual int ReadsInFlight() const { return 1; }

  // Reads of several files at once (ReadFiles below). Files that can be read together (the
  // remote files of one client) return the same non-null key, and any one of them reads a
  // group of such reads with ReadBatch; a file that returns null (the default) is read on
  // its own.
  virtual const void* BatchKey() const { return nullptr; }
  // ReadFiles' contract for one group (`on_done` gets indices into `reads`); the default
  // reads them one after another.
  // REQUIRES: every read's file has this file's non-null BatchKey().
  virtual void ReadBatch(std::span<const struct FileRead> reads, const std::string& what,
                         const std::function<void(size_t)>& on_done) const;
};

// One read of ReadFiles: `n` bytes at `offset` of `file` into `buf`.
struct FileRead {
  const File* file = nullptr;
  uint64_t offset = 0;
  void* buf = nullptr;
  size_t n = 0;
};

// Reads every range whole (ReadFully's contract; errors name the file): ranges of remote files
// of one client all in flight at once (a batch of images fetched together), the others one
// after another.
//
// `on_done(i)`, where given, is called on the calling thread as soon as reads[i]'s bytes are
// all in its buffer, once per read that succeeds, in the order they complete (not the order
// of `reads`), while the reads not yet complete stay in flight: a caller that decodes each
// file in on_done overlaps its decoding with the transfers of the others. A read that fails
// gets no call; the first failure (in the order of `reads`) is thrown once every read of its
// group has ended, the others having had their calls. An exception from on_done stops the
// reads still in flight and is thrown as it is.
void ReadFiles(std::span<const FileRead> reads, const std::string& what,
               const std::function<void(size_t)>& on_done = nullptr);

enum class PathType { kMissing, kFile, kDirectory };

// One entry of FileSystem::List: a name inside the folder (no slash), its type and, for a
// file, its size in bytes.
struct DirEntry {
  std::string name;
  PathType type = PathType::kFile;
  uint64_t size = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Throws Error(kNotFound) for a missing file, Error(kIo) for other open failures.
  virtual std::unique_ptr<File> Open(const std::string& path) const = 0;
  // What is at `path`: a file, a folder (for an object store, a prefix with objects under
  // it), or nothing. Throws Error(kIo) only when the question cannot be answered.
  virtual PathType Type(const std::string& path) const = 0;
  // The entries of folder `path`, sorted by name. Throws Error(kNotFound) when there is no
  // such folder.
  virtual std::vector<DirEntry> List(const std::string& path) const = 0;
  // Why Type found nothing at `path`, for the error that says so: for a remote path what the
  // store answered (status, error code, request id, endpoint); empty when there is nothing
  // to add to "no such file" (a local path, or a path Type was not asked about).
  // Default: empty.
  virtual std::string WhyMissing(const std::string& path) const {
    (void)path;
    return {};
  }
};

// The file system every source uses unless told otherwise: s3://, http:// and https://
// URIs go to the process's remote file system (gpufeed/remote.h), every other path to
// PosixFileSystem(). In a program without remote support (built with
// -DGPUFEED_WITH_REMOTE=OFF, or not linking gpufeed_remote) a URI is refused with
// Error(kUnsupported) naming that option. Lives for the whole program.
std::shared_ptr<const FileSystem> DefaultFileSystem();

// True for s3://, http:// and https:// URIs.
bool IsRemoteUri(std::string_view path);

// The POSIX file system (open, pread, mmap). Lives for the whole program.
std::shared_ptr<const FileSystem> PosixFileSystem();

// `name` inside folder `dir`, for local paths and URIs alike ("s3://b/p" + "x" ->
// "s3://b/p/x"; no normalisation, which would fold a URI's "//").
std::string JoinPath(const std::string& dir, const std::string& name);

// Reads exactly `n` bytes at `offset`, retrying short reads. Throws Error(kCorruptData)
// naming `what` and the path when the file ends first, Error(kIo) when a read fails.
void ReadFully(const File& file, uint64_t offset, void* buf, size_t n, const std::string& what);

}  // namespace gpufeed
