#include "cache/shm/shm_builder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "core/format.h"
#include "core/io/fd_io.h"
#include "core/progress.h"
#include "core/system/proc_text.h"
#include "core/thread_pool.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// Samples one task reads from the base source and writes: a few MB, so tasks balance.
int64_t ChunkSamples(size_t sample_bytes) {
  constexpr size_t kChunkBytes = size_t{4} << 20;
  return std::max<int64_t>(1,
                           static_cast<int64_t>(kChunkBytes / std::max<size_t>(1, sample_bytes)));
}

// pwrite with an injectable ENOSPC. Returns 0 or an errno.
class FileWriter {
 public:
  FileWriter(int fd, int64_t enospc_after) : fd_(fd), enospc_after_(enospc_after) {}

  int Write(const void* data, size_t n, uint64_t offset) {
    if (enospc_after_ >= 0 &&
        written_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n) > enospc_after_) {
      return ENOSPC;
    }
    return PwriteAll(fd_, data, n, offset) ? 0 : errno;
  }
  // Whether the file has been unlinked (`gpufeed cache rm KEY` removes a build in progress):
  // the build stops rather than finish a file it can no longer publish.
  bool Unlinked() const {
    struct stat st {};
    return fstat(fd_, &st) == 0 && st.st_nlink == 0;
  }

 private:
  int fd_;
  int64_t enospc_after_;
  std::atomic<int64_t> written_{0};
};

ShmBuildResult Fail(ShmBuildStatus status, std::string message) {
  ShmBuildResult r;
  r.status = status;
  r.message = std::move(message);
  return r;
}

// WriteSamples' result when the file was removed under the build (not an errno).
constexpr int kUnlinked = -1;

ShmBuildResult FailErrno(int err, const std::string& what, const std::string& path) {
  if (err == kUnlinked) {
    return Fail(ShmBuildStatus::kRemoved,
                fmt::format("{} was removed while it was built (gpufeed cache rm)", path));
  }
  return Fail(
      err == ENOSPC || err == EDQUOT ? ShmBuildStatus::kNoSpace : ShmBuildStatus::kWriteFailed,
      fmt::format("{} {}: {}", what, path, std::strerror(err)));
}

// Writes every sample; returns 0 or the first write errno. Base-source errors and
// Error(kCancelled) (checked every task, a few MB; `what` names the build) propagate.
int WriteSamples(const Source& base, const ShmLayout& layout, FileWriter& writer,
                 const ShmBuildOptions& options, TenthsProgress& progress,
                 const std::string& what) {
  const int threads = options.threads;
  const Schema& schema = base.schema();
  const int64_t chunk = ChunkSamples(schema.SampleBytes());
  const int64_t tasks = (layout.samples + chunk - 1) / chunk;
  std::vector<std::unique_ptr<SourceWorkerState>> states(threads);
  std::vector<std::vector<std::vector<std::byte>>> scratch(threads);
  std::atomic<int> first_errno{0};
  // Every 64 MB read, the source's pages leave this process's mappings again, so the build
  // never holds the whole source in its PSS beside the cache it writes.
  const std::string identity = base.Identity();
  constexpr uint64_t kDropEvery = uint64_t{64} << 20;
  std::atomic<uint64_t> since_drop{0};
  std::atomic<uint64_t> written{0};
  std::mutex progress_mu;  // on_progress is called one at a time
  ThreadPool pool(threads);
  pool.ParallelFor(tasks, [&](int64_t task, int thread) {
    if (first_errno.load(std::memory_order_relaxed) != 0) return;
    ThrowIfCancelled(what);
    if (writer.Unlinked()) {
      int expected = 0;
      first_errno.compare_exchange_strong(expected, kUnlinked);
      return;
    }
    const int64_t begin = task * chunk;
    const int64_t rows = std::min(chunk, layout.samples - begin);
    if (!states[thread]) states[thread] = base.NewWorkerState();
    auto& buffers = scratch[thread];
    buffers.resize(schema.fields.size());
    BatchView view;
    view.rows = rows;
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      buffers[f].resize(layout.row_bytes[f] * static_cast<size_t>(chunk));
      view.fields.push_back(buffers[f].data());
    }
    std::vector<int64_t> indices(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) indices[i] = begin + i;
    base.Read(indices, view, states[thread].get());
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      const size_t n = layout.row_bytes[f] * static_cast<size_t>(rows);
      const int err =
          writer.Write(view.fields[f], n, layout.header_bytes + layout.RowBegin(f, begin));
      if (err != 0) {
        int expected = 0;
        first_errno.compare_exchange_strong(expected, err);
        return;
      }
      progress.Add(n);
      const uint64_t done = written.fetch_add(n) + n;
      if (options.on_progress && layout.data_bytes > 0) {
        std::lock_guard lock(progress_mu);
        options.on_progress(static_cast<double>(done) / static_cast<double>(layout.data_bytes));
      }
      if (since_drop.fetch_add(n) + n >= kDropEvery) {
        since_drop.store(0);
        DropMappedSourcePages(identity);
      }
    }
  });
  return first_errno.load();
}

// A read-only mapping of a whole file, unmapped on destruction (a mapping left behind would
// keep a removed tmpfs file's pages in memory until the process exits).
class ReadMapping {
 public:
  ReadMapping(int fd, size_t bytes) : bytes_(bytes) {
    p_ = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p_ == MAP_FAILED) {
      throw Error(ErrorCode::kIo,
                  fmt::format("mmap of a cache being built failed: {}", std::strerror(errno)));
    }
  }
  ~ReadMapping() { munmap(p_, bytes_); }
  ReadMapping(const ReadMapping&) = delete;
  ReadMapping& operator=(const ReadMapping&) = delete;
  const std::byte* data() const { return static_cast<const std::byte*>(p_); }

 private:
  void* p_;
  size_t bytes_;
};

// Hashes every block (each field's groups of whole rows, see shm_format.h) through a
// read-only mapping of the written file. Error(kCancelled) (checked every 256 blocks, 1 MiB
// of small rows; `what` names the build) propagates.
std::vector<uint64_t> HashBlocks(int fd, const ShmLayout& layout, int threads,
                                 const std::string& what) {
  std::vector<uint64_t> hashes(layout.blocks);
  if (layout.blocks == 0) return hashes;
  const ReadMapping mapping(fd, layout.total_bytes);
  const std::byte* data = mapping.data() + layout.header_bytes;
  constexpr int64_t kBlocksPerTask = 256;
  const int64_t tasks = (static_cast<int64_t>(layout.blocks) + kBlocksPerTask - 1) / kBlocksPerTask;
  ThreadPool pool(threads);
  pool.ParallelFor(tasks, [&](int64_t task, int) {
    ThrowIfCancelled(what);
    const uint64_t end = std::min<uint64_t>(layout.blocks, (task + 1) * kBlocksPerTask);
    uint64_t b = static_cast<uint64_t>(task) * kBlocksPerTask;
    // The field of block b: the last one whose first block is at or before it (fields with
    // no rows to hash own no blocks, and share their first_block with the next field).
    size_t f = 0;
    while (b < end) {
      while (f + 1 < layout.first_block.size() && layout.first_block[f + 1] <= b) ++f;
      const uint64_t k = b - layout.first_block[f];
      const int64_t first = layout.BlockFirstRow(f, k);
      const int64_t last = layout.BlockEndRow(f, k);
      hashes[b] = HashShmBlock(data + layout.RowBegin(f, first),
                               static_cast<size_t>(last - first) * layout.row_bytes[f]);
      ++b;
    }
  });
  return hashes;
}

}  // namespace

// MADV_DONTNEED on a mapping without write permission only
// unmaps its pages (they stay in the page cache; a fallback read faults them back in);
// writable mappings are left alone (a private written page would be lost). The files are
// the ones the source's identity stamps, matched by device and inode in /proc/self/maps.
void DropMappedSourcePages(const std::string& identity) {
  static const std::regex kStamp(R"(stamp:(/[^|=]+)=)");
  std::set<std::pair<uint64_t, uint64_t>> files;  // (device, inode)
  for (std::sregex_iterator it(identity.begin(), identity.end(), kStamp), end; it != end; ++it) {
    struct stat st {};
    if (stat((*it)[1].str().c_str(), &st) == 0) files.insert({st.st_dev, st.st_ino});
  }
  std::string maps;
  if (files.empty() || !ReadTextFile("/proc/self/maps", &maps)) return;
  std::istringstream lines(maps);
  std::string line;
  while (std::getline(lines, line)) {
    // start-end perms offset major:minor inode [path]
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset,
                    &major, &minor, &inode) != 7 ||
        perms[1] != '-' || end <= start) {
      continue;
    }
    if (files.count({makedev(major, minor), inode}) == 0) continue;
    madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
  }
}

ShmBuildResult BuildShmFile(const Source& base, const ShmUserDir& dir, const std::string& tmp_name,
                            const std::string& final_name, const ShmBuildOptions& options) {
  const std::string tmp_path = dir.PathOf(tmp_name);
  const std::string final_path = dir.PathOf(final_name);
  GPUFEED_ASSERT(options.threads > 0, "threads > 0");
  ShmHeader header;
  header.identity = base.Identity();
  header.schema_text = base.schema().ToString();
  header.description = base.Describe();
  header.created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  header.layout = PlanShmLayout(base.schema(), base.size(), header.identity, header.schema_text,
                                header.description);
  const ShmLayout& layout = header.layout;

  struct statvfs fs {};
  if (fstatvfs(dir.fd(), &fs) == 0) {
    const uint64_t avail = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (avail < layout.total_bytes) {
      return Fail(ShmBuildStatus::kNoSpace,
                  fmt::format("{} has {} free, the cache needs {}", dir.path(),
                              FormatBytes(static_cast<double>(avail)),
                              FormatBytes(static_cast<double>(layout.total_bytes))));
    }
  }

  // Only this user (or the folder's group) may read the samples (and see the source's path in
  // the header).
  const int fd = dir.CreateFile(tmp_name);
  if (fd < 0) return FailErrno(errno, "cannot create", tmp_path);
  auto discard = [&] {
    close(fd);
    unlinkat(dir.fd(), tmp_name.c_str(), 0);
  };
  if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) {
    const int err = errno;
    discard();
    return FailErrno(err, "cannot size", tmp_path);
  }
  FileWriter writer(fd, options.faults.enospc_after_bytes);
  TenthsProgress progress(
      options.verbose, layout.data_bytes, [&](int percent, uint64_t done, double s) {
        return fmt::format("cache: building {}: {}% ({} of {}, {:.0f} s)", final_path, percent,
                           FormatBytes(static_cast<double>(done)),
                           FormatBytes(static_cast<double>(layout.data_bytes)), s);
      });
  // A cancelled build throws from the loops below and is removed like a failed one: only a
  // complete file is ever renamed to its published name.
  const std::string what = fmt::format("building the shared-memory cache {}", final_path);
  try {
    if (const int err = WriteSamples(base, layout, writer, options, progress, what); err != 0) {
      discard();
      return FailErrno(err, "cannot write", tmp_path);
    }
    header.block_hashes = HashBlocks(fd, layout, options.threads, what);
  } catch (...) {
    discard();
    throw;
  }
  const std::vector<std::byte> bytes = EncodeShmHeader(header, dir.secret());
  if (const int err = writer.Write(bytes.data(), bytes.size(), 0); err != 0) {
    discard();
    return FailErrno(err, "cannot write the header of", tmp_path);
  }
  // Readers find the file complete or not at all: rename is atomic within the folder.
  if (renameat(dir.fd(), tmp_name.c_str(), dir.fd(), final_name.c_str()) != 0) {
    const int err = errno;
    discard();
    return FailErrno(err, "cannot publish", final_path);
  }
  ShmBuildResult r;
  r.status = ShmBuildStatus::kPublished;
  r.fd = fd;
  r.header = std::move(header);
  return r;
}

}  // namespace gpufeed
