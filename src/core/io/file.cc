// The POSIX file seam: open with O_CLOEXEC, pread with EINTR retry, fstat, lazy read-only mmap.
#include "gpufeed/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "core/format.h"
#include "core/io/mapped_read_guard.h"
#include "core/log.h"
#include "core/system/proc_text.h"
#include "core/system/system_memory.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

std::string ErrnoText(int err) { return std::generic_category().message(err); }

// One Linux pread moves at most ~2 GiB; larger requests are split by the loop in ReadAt.
constexpr size_t kMaxReadChunk = size_t{1} << 30;

// The pointer Map() hands out for an empty file: mmap refuses length 0, and a non-null
// pointer keeps "nullptr = no mapping, use ReadAt" unambiguous for callers.
const std::byte kEmptyMapping[1] = {};

#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

uintptr_t RoundUpToPage(uintptr_t n) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

// Where the page cache holds a range of the file in small folios (it was just written, or
// read with read()/pread, whose readahead makes folios of 4-128 KiB), every new process's
// mapping pays one trap per 4 KiB page of it again. Probes up to 16 fully cached 2 MiB
// regions spread over [begin, end) of the mapping: when fewer than half map as one PMD each,
// drops the range's cached pages (POSIX_FADV_DONTNEED: clean pages no process has mapped;
// dirty and mapped ones stay), so this mapping's faults, under MADV_HUGEPAGE, read it back
// in 2 MiB folios. One probe region is dropped and read back first: where it does not come
// back as one folio (a file system without large folios), nothing more is dropped. The first
// process pays a read of the range from storage (0.45 s for the demo set here, about what
// its traps cost) and every later process maps it with one trap per 2 MiB. Only ranges the caller
// gathers from the mapping come here: a range read with pread would come back in small folios and
// be dropped again by the next process. Returns whether it dropped the range; a region that cannot
// be read (a file truncated under the mapping) ends the probe (the readers report it).
bool PromoteToHugeFolios(int fd, std::byte* map, uint64_t begin, uint64_t end,
                         const std::string& path) {
  const uint64_t first = (begin + kHugePage - 1) / kHugePage * kHugePage;
  const uint64_t regions = end > first ? (end - first) / kHugePage : 0;
  if (regions == 0) return false;
  const std::optional<uint64_t> before = ProcessFilePmdMappedBytes();
  if (!before) return false;
  constexpr uint64_t kProbes = 16;
  const uint64_t probes_wanted = std::min(regions, kProbes);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(kHugePage / page);
  std::vector<const volatile std::byte*> probes;
  for (uint64_t i = 0; i < probes_wanted; ++i) {
    std::byte* region = map + first + i * regions / probes_wanted * kHugePage;
    if (mincore(region, kHugePage, resident.data()) != 0) return false;
    if (std::all_of(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; })) {
      probes.push_back(region);
    }
  }
  if (probes.empty()) return false;  // not cached: the faults read it in 2 MiB folios
  try {
    GuardMappedRead(path, [&] {
      for (const volatile std::byte* p : probes) (void)*p;
    });
  } catch (const Error&) {
    return false;
  }
  const std::optional<uint64_t> after = ProcessFilePmdMappedBytes();
  if (!after || *after < *before) return false;
  const uint64_t pmd_regions = (*after - *before) / kHugePage;
  if (2 * pmd_regions >= probes.size()) return false;  // already in 2 MiB folios
  // One region first: dropped and read back through the mapping. Where the file system cannot
  // make 2 MiB folios (no large-folio support, or the pages stay because another process maps
  // them), it comes back in small pages: stop there, so that no process drops the whole
  // range again and again for nothing.
  auto* trial = const_cast<std::byte*>(probes.front());
  madvise(trial, kHugePage, MADV_DONTNEED);
  if (posix_fadvise(fd, static_cast<off_t>(trial - map), static_cast<off_t>(kHugePage),
                    POSIX_FADV_DONTNEED) != 0) {
    return false;
  }
  const std::optional<uint64_t> trial_before = ProcessFilePmdMappedBytes();
  try {
    GuardMappedRead(path, [&] { (void)*static_cast<const volatile std::byte*>(trial); });
  } catch (const Error&) {
    return false;
  }
  const std::optional<uint64_t> trial_after = ProcessFilePmdMappedBytes();
  if (!trial_before || !trial_after || *trial_after < *trial_before + kHugePage) return false;
  // Unmap this process's pages of the range first (a shared read-only mapping: nothing is
  // lost), so the probes' pages can be dropped too.
  const uint64_t page_begin = begin / page * page;
  madvise(map + page_begin, end - page_begin, MADV_DONTNEED);
  if (posix_fadvise(fd, static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                    POSIX_FADV_DONTNEED) != 0) {
    return false;
  }
  Log(LogLevel::kInfo,
      fmt::format("{}: reading its cached pages again as 2 MiB pages (they were small: {} of "
                  "{} probed 2 MiB regions whole), so that this and every later process maps "
                  "it with one fault per 2 MiB instead of 512; once per file",
                  path, pmd_regions, probes.size()));
  return true;
}

// Maps `size` bytes of the file read-only at a 2 MiB-aligned address, with MADV_HUGEPAGE when
// the file fits in half of the available RAM (*advised says whether it was given); MAP_FAILED
// when the file cannot be mapped.
//
// Why: a shuffled gather touches every page of the mapping, and on a VM the first access to
// each 4 KiB page of a new process's mapping traps to the hypervisor (about 0.3-0.45 s for the
// 820 MB demo set, in every new process: README, Streaming at memory speed). Where the page
// cache holds the file in 2 MiB folios (ext4 since Linux 6.16, XFS since 5.18), an aligned
// mapping maps each folio with one PMD: one trap per 2 MiB, and the gather's TLB reach grows
// 512-fold. MADV_HUGEPAGE makes a fault on an uncached part read it in as a 2 MiB folio, so
// the first process after a boot (or after the cache was dropped) leaves the file that way
// for every later one: measured on the 2-core VM, a new process touched the whole demo set
// in 0.014-0.016 s against 0.44 s in 4 KiB folios. The advice is not given for a file larger
// than half the available RAM: there a fault reads 2 MiB for a row of a few KB, and the page
// cache cannot keep the rest until it is needed. Where the kernel refuses or ignores either
// step, the mapping works as a plain one.
void* MapFileAligned(int fd, uint64_t size, bool* advised) {
  *advised = false;
  if (size < kHugePage || size > std::numeric_limits<uintptr_t>::max() - 2 * kHugePage) {
    return mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  }
  // Reserve room for the file plus one huge page of address space, place the file at the
  // first 2 MiB boundary inside it, and give back the reservation's ends.
  const uintptr_t reserve_bytes = RoundUpToPage(size + kHugePage);
  void* reserve =
      mmap(nullptr, reserve_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) return mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const auto base = reinterpret_cast<uintptr_t>(reserve);
  const uintptr_t aligned = (base + kHugePage - 1) & ~(kHugePage - 1);
  void* p = mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    munmap(reserve, reserve_bytes);
    return MAP_FAILED;
  }
  if (aligned > base) munmap(reserve, aligned - base);
  const uintptr_t file_end = aligned + RoundUpToPage(size);
  if (base + reserve_bytes > file_end) {
    munmap(reinterpret_cast<void*>(file_end), base + reserve_bytes - file_end);
  }
  const uint64_t available = AvailableRamBytes();
  *advised = available > 0 && size <= available / 2 && madvise(p, size, MADV_HUGEPAGE) == 0;
  return p;
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, uint64_t size, int64_t mtime_ns, std::string stamp)
      : path_(std::move(path)),
        fd_(fd),
        size_(size),
        mtime_ns_(mtime_ns),
        stamp_(std::move(stamp)) {}

  ~PosixFile() override {
    if (map_ != nullptr && map_ != kEmptyMapping) munmap(const_cast<std::byte*>(map_), size_);
    close(fd_);
  }

  const std::string& path() const override { return path_; }
  uint64_t Size() const override { return size_; }
  int64_t ModificationTimeNs() const override { return mtime_ns_; }
  std::string VersionStamp() const override { return stamp_; }

  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    auto* dst = static_cast<char*>(buf);
    size_t done = 0;
    while (done < n) {
      const size_t want = std::min(n - done, kMaxReadChunk);
      const ssize_t got = pread(fd_, dst + done, want, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::kIo, fmt::format("{}: read of {} bytes at offset {} failed: {}",
                                                path_, want, offset + done, ErrnoText(errno)));
      }
      if (got == 0) break;  // end of file
      done += static_cast<size_t>(got);
    }
    return done;
  }

  const std::byte* Map() const override {
    std::call_once(map_once_, [this] {
      if (size_ == 0) {
        map_ = kEmptyMapping;
        return;
      }
      // Under an address-space limit a mapping takes its file's whole size of it, whatever
      // is read: a file that would take more than a quarter of what is left is read with
      // pread instead, so the batches and the user's own arrays keep the room.
      if (const std::optional<AddressSpace> space = AddressSpaceLimit();
          space && size_ > space->left() / 4) {
        Log(LogLevel::kInfo,
            fmt::format("{}: read without mapping it: its {} would take more than a quarter of "
                        "the {} the process's address-space limit leaves",
                        path_, FormatBytes(static_cast<double>(size_)),
                        FormatBytes(static_cast<double>(space->left()))));
        return;
      }
      void* p = MapFileAligned(fd_, size_, &huge_advised_);
      // A file that cannot be mapped (a pipe, some network file systems) is still readable
      // through ReadAt, so a failed mmap is not an error: callers fall back.
      map_ = p == MAP_FAILED ? nullptr : static_cast<const std::byte*>(p);
    });
    return map_;
  }

  void PreferHugePages(uint64_t offset, uint64_t length) const override {
    const std::byte* map = Map();
    if (map == nullptr || map == kEmptyMapping || !huge_advised_ || offset >= size_) return;
    const uint64_t end = offset + std::min(length, size_ - offset);
    std::lock_guard lock(promote_mu_);
    PromoteToHugeFolios(fd_, const_cast<std::byte*>(map), offset, end, path_);
  }

 private:
  const std::string path_;
  const int fd_;
  const uint64_t size_;
  const int64_t mtime_ns_;
  const std::string stamp_;  // VersionStamp
  // Written once inside call_once, which orders that write before every return of Map().
  mutable std::once_flag map_once_;
  mutable const std::byte* map_ = nullptr;
  mutable bool huge_advised_ = false;  // written with map_, inside call_once
  mutable std::mutex promote_mu_;      // one PreferHugePages at a time (its probes count PMDs)
};

class PosixFs final : public FileSystem {
 public:
  std::unique_ptr<File> Open(const std::string& path) const override {
    int fd;
    do {
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        throw Error(ErrorCode::kNotFound, fmt::format("{}: no such file", path));
      }
      throw Error(ErrorCode::kIo, fmt::format("{}: cannot open: {}", path, ErrnoText(err)));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      throw Error(ErrorCode::kIo, fmt::format("{}: cannot stat: {}", path, ErrnoText(err)));
    }
    if (S_ISDIR(st.st_mode)) {
      close(fd);
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: is a folder, expected a file", path));
    }
    const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    const int64_t ctime_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
    return std::make_unique<PosixFile>(path, fd, static_cast<uint64_t>(st.st_size), mtime_ns,
                                       fmt::format("{}:{}", st.st_ino, ctime_ns));
  }

  PathType Type(const std::string& path) const override {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (std::filesystem::is_directory(status)) return PathType::kDirectory;
    return std::filesystem::exists(status) ? PathType::kFile : PathType::kMissing;
  }

  std::vector<DirEntry> List(const std::string& path) const override {
    namespace stdfs = std::filesystem;
    std::error_code ec;
    stdfs::directory_iterator it(path, ec);
    if (ec) {
      const ErrorCode code =
          ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory
              ? ErrorCode::kNotFound
              : ErrorCode::kIo;
      throw Error(code, fmt::format("{}: cannot list the folder: {}", path, ec.message()));
    }
    std::vector<DirEntry> entries;
    for (stdfs::directory_iterator end; it != end; it.increment(ec)) {
      std::error_code entry_ec;
      DirEntry entry{it->path().filename().string(), PathType::kFile, 0};
      if (it->is_directory(entry_ec)) {
        entry.type = PathType::kDirectory;
      } else {
        const auto size = it->file_size(entry_ec);
        if (!entry_ec) entry.size = size;
      }
      entries.push_back(std::move(entry));
    }
    if (ec) {
      throw Error(ErrorCode::kIo,
                  fmt::format("{}: cannot list the folder: {}", path, ec.message()));
    }
    std::sort(entries.begin(), entries.end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return entries;
  }
};

}  // namespace

std::shared_ptr<const FileSystem> PosixFileSystem() {
  static const std::shared_ptr<const FileSystem> fs = std::make_shared<PosixFs>();
  return fs;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

void File::ReadMany(std::span<const ReadRange> ranges, const std::string& what) const {
  for (const ReadRange& r : ranges) ReadFully(*this, r.offset, r.buf, r.n, what);
}

void File::ReadBatch(std::span<const FileRead> reads, const std::string& what,
                     const std::function<void(size_t)>& on_done) const {
  std::optional<Error> first_failure;
  for (size_t i = 0; i < reads.size(); ++i) {
    const FileRead& r = reads[i];
    try {
      ReadFully(*r.file, r.offset, r.buf, r.n, what);
    } catch (const Error& e) {
      if (!first_failure) first_failure = e;
      continue;
    }
    if (on_done) on_done(i);
  }
  if (first_failure) throw *first_failure;
}

void ReadFiles(std::span<const FileRead> reads, const std::string& what,
               const std::function<void(size_t)>& on_done) {
  std::vector<FileRead> group;
  std::vector<size_t> group_index;  // group position -> index in `reads`
  std::vector<bool> done(reads.size(), false);
  for (size_t i = 0; i < reads.size(); ++i) {
    if (done[i]) continue;
    const void* key = reads[i].file->BatchKey();
    if (key == nullptr) {
      ReadFully(*reads[i].file, reads[i].offset, reads[i].buf, reads[i].n, what);
      if (on_done) on_done(i);
      continue;
    }
    group.clear();
    group_index.clear();
    for (size_t j = i; j < reads.size(); ++j) {
      if (!done[j] && reads[j].file->BatchKey() == key) {
        group.push_back(reads[j]);
        group_index.push_back(j);
        done[j] = true;
      }
    }
    std::function<void(size_t)> group_done;
    if (on_done) group_done = [&](size_t k) { on_done(group_index[k]); };
    reads[i].file->ReadBatch(group, what, group_done);
  }
}

void ReadFully(const File& file, uint64_t offset, void* buf, size_t n, const std::string& what) {
  auto* dst = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const size_t got = file.ReadAt(offset + done, dst + done, n - done);
    if (got == 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: {}: file ends at byte {} but {} bytes were expected at "
                              "offset {} (file size {})",
                              file.path(), what, offset + done, n, offset, file.Size()));
    }
    done += got;
  }
}

}  // namespace gpufeed
