#include "remote/disk/disk_cache_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "core/io/fd_io.h"
#include "core/log.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr char kLockName[] = "lock";
// Blocks fetched into memory at once, at most: bounds the memory of one read.
constexpr uint64_t kMaxBatchBlocks = 32;
constexpr uint64_t kMaxBatchBytes = uint64_t{256} << 20;
// Descriptors of blocks on disk the process keeps open for reads without the lock file: at
// most this many in all, so that open files stay far below the descriptor limit.
constexpr int kMaxHeldBlocks = 256;
std::atomic<int> held_blocks{0};

// A descriptor closed when it goes out of scope (closing drops its OFD locks).
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Marks a block as used now, so eviction takes older ones first. At most once a second per
// block: the touch is a metadata write, and LRU needs no finer order than that.
void Touch(int fd, const struct stat& st) {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec - st.st_mtim.tv_sec >= 1) futimens(fd, nullptr);
}

// After a block vanished under a wait (its downloader failed, or it was evicted), two
// readers could keep meeting each other's momentary locks: a short random pause breaks that.
void PauseBeforeRetry() {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 2000));
}

}  // namespace

DiskCachedFile::DiskCachedFile(std::unique_ptr<File> base,
                               std::shared_ptr<const DiskCacheStore> store, int object_fd,
                               std::string object_path, uint64_t block_bytes)
    : base_(std::move(base)),
      store_(std::move(store)),
      object_fd_(object_fd),
      object_path_(std::move(object_path)),
      block_bytes_(block_bytes),
      size_(base_->Size()),
      blocks_(size_ / block_bytes_ + (size_ % block_bytes_ != 0)) {}

DiskCachedFile::~DiskCachedFile() {
  if (whole_ != nullptr) munmap(const_cast<std::byte*>(whole_.load()), size_);
  for (const auto& [index, fd] : held_) close(fd);
  held_blocks.fetch_sub(static_cast<int>(held_.size()));
  close(object_fd_);
}

void DiskCachedFile::Hold(uint64_t index, int fd) const {
  std::unique_lock lock(held_mu_);
  if (held_.contains(index) || held_blocks.fetch_add(1) >= kMaxHeldBlocks) {
    if (!held_.contains(index)) held_blocks.fetch_sub(1);
    return;
  }
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    held_blocks.fetch_sub(1);
    return;
  }
  held_.emplace(index, copy);
  if (held_.size() == blocks_) MapWhole();
}

void DiskCachedFile::MapIfWhole() const {
  if (blocks_ == 0 || blocks_ > static_cast<uint64_t>(kMaxHeldBlocks)) return;
  for (uint64_t index = 0; index < blocks_; ++index) {
    // A block under its final name is only ever replaced whole, by a rename: no lock is needed
    // to read it. A block that is not whole is left to the reads, which take its lock.
    const ScopedFd fd(
        OpenOwnedFileAt(object_fd_, std::to_string(index), O_RDONLY, BlockPath(index)));
    struct stat st {};
    BlockCheck check;
    if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || !CheckBlock(index, fd.get(), st, {}, &check)) {
      return;
    }
    Hold(index, fd.get());
  }
}

void DiskCachedFile::MapWhole() const {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  constexpr uint64_t kHuge = uint64_t{2} << 20;
  if (size_ == 0 || block_bytes_ % page != 0) return;
  // At a 2 MiB boundary, as a local file is mapped (src/core/file.cc), so the page cache's
  // 2 MiB folios map whole.
  void* reserved =
      mmap(nullptr, size_ + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return;
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(reserved) + kHuge - 1) &
                                            ~uintptr_t{kHuge - 1});
  const auto head = static_cast<size_t>(base - static_cast<std::byte*>(reserved));
  if (head > 0) munmap(reserved, head);
  if (kHuge - head > 0) munmap(base + size_, kHuge - head);
  for (const auto& [index, fd] : held_) {
    if (mmap(base + index * block_bytes_, BlockLength(index), PROT_READ, MAP_SHARED | MAP_FIXED, fd,
             0) == MAP_FAILED) {
      munmap(base, size_);
      return;
    }
  }
  madvise(base, size_, MADV_HUGEPAGE);
  whole_ = base;
}

bool DiskCachedFile::ServeHeld(PiecesByBlock& pieces) const {
  std::shared_lock lock(held_mu_);
  for (auto it = pieces.begin(); it != pieces.end();) {
    const auto held = held_.find(it->first);
    bool served = held != held_.end();
    if (served) {
      for (const Piece& p : it->second) {
        served = served && PreadAll(held->second, p.dst, p.n, p.offset_in_block);
      }
    }
    it = served ? pieces.erase(it) : std::next(it);
  }
  return pieces.empty();
}

uint64_t DiskCachedFile::BlockLength(uint64_t index) const {
  return std::min(block_bytes_, size_ - index * block_bytes_);
}

std::string DiskCachedFile::BlockPath(uint64_t index) const {
  return fmt::format("{}/{}", object_path_, index);
}

size_t DiskCachedFile::ReadAt(uint64_t offset, void* buf, size_t n) const {
  if (offset >= size_ || n == 0) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  const ReadRange range{offset, buf, n};
  ReadMany({&range, 1}, "read");
  return n;
}

bool DiskCachedFile::CheckBlock(uint64_t index, int fd, const struct stat& st,
                                const std::vector<Piece>& pieces, BlockCheck* check) const {
  const std::string path = BlockPath(index);
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes == BlockFileBytes(BlockLength(index)) && store_->Verified(path, st.st_ino)) {
    for (const Piece& p : pieces) {
      if (!PreadAll(fd, p.dst, p.n, p.offset_in_block)) {
        *check = {errno == 0 ? BlockState::kDamaged : BlockState::kUnreadable,
                  errno == 0 ? "it was cut short" : std::strerror(errno)};
        return false;
      }
    }
    return true;
  }
  // The pieces are filled as the payload streams by; a block that fails is fetched again
  // and fills them anew.
  *check = CheckBlockFile(
      fd, file_bytes, index, BlockLength(index), [&](uint64_t offset, const char* data, size_t n) {
        for (const Piece& p : pieces) {
          const uint64_t begin = std::max(offset, p.offset_in_block);
          const uint64_t end = std::min(offset + n, p.offset_in_block + p.n);
          if (begin < end) {
            std::memcpy(p.dst + (begin - p.offset_in_block), data + (begin - offset), end - begin);
          }
        }
      });
  if (check->state != BlockState::kWhole) return false;
  store_->SetVerified(path, st.st_ino);
  return true;
}

void DiskCachedFile::Discard(uint64_t index, const struct stat& st, const BlockCheck& check) const {
  if (check.state == BlockState::kDamaged) {
    store_->counters().damaged.fetch_add(1);
    Log(LogLevel::kWarning,
        fmt::format("disk cache: block file {} of {} is damaged: {}; removed it and fetching "
                    "the block again",
                    BlockPath(index), path(), check.what));
  } else if (store_->FirstOtherLayout()) {
    Log(LogLevel::kInfo,
        fmt::format("disk cache: {} holds blocks written by a gpufeed of another layout "
                    "(first: {}); they are fetched again as they are read",
                    store_->dir(), BlockPath(index)));
  }
  store_->RemoveBlock(object_fd_, index, static_cast<uint64_t>(st.st_size));
}

bool DiskCachedFile::ServeFromDisk(uint64_t index, const std::vector<Piece>& pieces,
                                   bool write_locked) const {
  const std::string name = std::to_string(index);
  const ScopedFd fd(OpenOwnedFileAt(object_fd_, name, O_RDONLY, BlockPath(index)));
  if (fd.get() < 0) return false;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return false;
  BlockCheck check;
  if (!CheckBlock(index, fd.get(), st, pieces, &check)) {
    if (check.state == BlockState::kUnreadable) {
      throw Error(ErrorCode::kIo, fmt::format("{}: cannot read the cached block {}: {}", path(),
                                              BlockPath(index), check.what));
    }
    if (write_locked) Discard(index, st, check);
    return false;
  }
  Touch(fd.get(), st);
  store_->counters().hits.fetch_add(1);
  Hold(index, fd.get());
  return true;
}

void DiskCachedFile::ReadMany(std::span<const ReadRange> ranges, const std::string& what) const {
  const std::byte* whole = whole_.load(std::memory_order_acquire);
  // A range past the end goes on to the checks below, which name it.
  if (whole != nullptr && std::all_of(ranges.begin(), ranges.end(), [&](const ReadRange& r) {
        return r.offset <= size_ && r.n <= size_ - r.offset;
      })) {
    for (const ReadRange& r : ranges) std::memcpy(r.buf, whole + r.offset, r.n);
    return;
  }
  PiecesByBlock pieces;
  for (const ReadRange& r : ranges) {
    if (r.n == 0) continue;
    if (r.offset > size_ || r.n > size_ - r.offset) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: {}: file ends at byte {} but {} bytes were expected at "
                              "offset {} (file size {})",
                              path(), what, size_, r.n, r.offset, size_));
    }
    for (uint64_t pos = r.offset; pos < r.offset + r.n;) {
      const uint64_t index = pos / block_bytes_;
      const uint64_t in_block = pos - index * block_bytes_;
      const uint64_t n = std::min(r.offset + r.n - pos, BlockLength(index) - in_block);
      pieces[index].push_back(
          {in_block, static_cast<char*>(r.buf) + (pos - r.offset), static_cast<size_t>(n)});
      pos += n;
    }
  }
  if (pieces.empty() || ServeHeld(pieces)) return;
  const std::string lock_path = object_path_ + "/" + kLockName;
  const ScopedFd lock(OpenOwnedFileAt(object_fd_, kLockName, O_RDWR | O_CREAT, lock_path));
  const int fd = lock.get();
  std::vector<uint64_t> pending;
  for (const auto& [index, unused] : pieces) pending.push_back(index);
  for (int round = 0; !pending.empty(); ++round) {
    if (round > 1) PauseBeforeRetry();
    // Without waiting: read the blocks on disk, take the fetch of absent ones nobody fetches.
    std::vector<uint64_t> fetch;
    std::vector<uint64_t> wait;
    for (const uint64_t b : pending) {
      if (TryLockBlock(fd, b, F_RDLCK, lock_path)) {
        const bool served = ServeFromDisk(b, pieces[b], /*write_locked=*/false);
        TryLockBlock(fd, b, F_UNLCK, lock_path);
        if (served) continue;
      }
      if (!TryLockBlock(fd, b, F_WRLCK, lock_path)) {
        wait.push_back(b);
      } else if (ServeFromDisk(b, pieces[b], /*write_locked=*/true)) {  // written since the look
        TryLockBlock(fd, b, F_UNLCK, lock_path);
      } else {
        fetch.push_back(b);
      }
    }
    Fetch(fd, fetch, pieces, what);
    // Holding no write lock: wait for the blocks another process fetches, then read them.
    pending.clear();
    for (const uint64_t b : wait) {
      const bool waited = !TryLockBlock(fd, b, F_RDLCK, lock_path);
      if (waited) WaitLockBlock(fd, b, F_RDLCK, lock_path);
      const bool served = ServeFromDisk(b, pieces[b], /*write_locked=*/false);
      TryLockBlock(fd, b, F_UNLCK, lock_path);
      if (!served) {
        pending.push_back(b);
      } else if (waited) {
        store_->counters().waits.fetch_add(1);
      }
    }
  }
}

void DiskCachedFile::Fetch(int lock_fd, std::span<const uint64_t> blocks,
                           const PiecesByBlock& pieces, const std::string& what) const {
  const uint64_t most = std::min(kMaxBatchBlocks, kMaxBatchBytes / block_bytes_);
  const uint64_t batch =
      std::clamp<uint64_t>(store_->budget_bytes() / block_bytes_, 1, std::max<uint64_t>(most, 1));
  for (size_t i = 0; i < blocks.size(); i += batch) {
    FetchBatch(lock_fd, blocks.subspan(i, std::min<size_t>(batch, blocks.size() - i)), pieces,
               what);
  }
}

void DiskCachedFile::FetchBatch(int lock_fd, std::span<const uint64_t> blocks,
                                const PiecesByBlock& pieces, const std::string& what) const {
  std::vector<BlockTemp> temps;
  uint64_t total = 0;
  for (const uint64_t b : blocks) {
    temps.push_back({b, BlockLength(b), {}, -1});
    total += BlockLength(b);
  }
  const bool kept = store_->Reserve(object_fd_, temps);
  // Reserved temporaries not yet published are removed however this ends (a throwing base
  // read included), so only a killed process leaves one behind.
  struct TempGuard {
    const DiskCacheStore& store;
    int object_fd;
    std::span<BlockTemp> temps;
    ~TempGuard() { store.Release(object_fd, temps); }
  } guard{*store_, object_fd_, kept ? std::span<BlockTemp>(temps) : std::span<BlockTemp>()};

  std::unique_ptr<char[]> buf(new char[total]);
  std::vector<char*> data;
  std::vector<ReadRange> runs;  // one range per run of consecutive blocks
  char* at = buf.get();
  for (size_t i = 0; i < blocks.size(); ++i) {
    data.push_back(at);
    const uint64_t length = BlockLength(blocks[i]);
    if (i > 0 && blocks[i] == blocks[i - 1] + 1) {
      runs.back().n += length;
    } else {
      runs.push_back({blocks[i] * block_bytes_, at, static_cast<size_t>(length)});
    }
    at += length;
  }
  base_->ReadMany(runs, what);
  DiskCacheCounters& counters = store_->counters();
  counters.misses.fetch_add(static_cast<int64_t>(blocks.size()));
  counters.bytes_fetched.fetch_add(static_cast<int64_t>(total));
  if (kept) {
    Publish(temps, data);
    // Before the write locks go: a temporary without its writer's lock is taken for stale.
    store_->Release(object_fd_, temps);
  } else {
    counters.uncached.fetch_add(static_cast<int64_t>(blocks.size()));
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (const Piece& p : pieces.at(blocks[i])) {
      std::memcpy(p.dst, data[i] + p.offset_in_block, p.n);
    }
    TryLockBlock(lock_fd, blocks[i], F_UNLCK, object_path_);
  }
}

void DiskCachedFile::Publish(std::span<BlockTemp> temps, const std::vector<char*>& data) const {
  // Every temporary written first, its writeback started, and only then each waited for: the
  // disk flushes the batch together rather than one block per round trip.
  std::vector<bool> written(temps.size());
  for (size_t i = 0; i < temps.size(); ++i) {
    const BlockTemp& t = temps[i];
    const auto trailer = EncodeBlockTrailer(t.index, t.length, BlockChecksum(data[i], t.length));
    written[i] = PwriteAll(t.fd, data[i], t.length, 0) &&
                 PwriteAll(t.fd, trailer.data(), trailer.size(), t.length);
    if (written[i]) sync_file_range(t.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  }
  bool renamed = false;
  for (size_t i = 0; i < temps.size(); ++i) {
    BlockTemp& t = temps[i];
    const std::string name = std::to_string(t.index);
    // A block is renamed into place only once its bytes are on the disk: a rename that reached
    // the disk before them would, after a power cut, publish a file whose tail is zeros. A
    // temporary that failed is left open for the caller's guard to remove.
    if (written[i] && fdatasync(t.fd) == 0 &&
        renameat(object_fd_, t.temp_name.c_str(), object_fd_, name.c_str()) == 0) {
      close(t.fd);
      t.fd = -1;
      renamed = true;
    } else {
      store_->counters().uncached.fetch_add(1);
    }
  }
  // One flush of the folder makes the batch's names durable before their write locks go. A
  // reader may open a block between its rename and this flush: its bytes are on the disk
  // already, and a name lost to a power cut only means a block fetched again.
  if (renamed) fsync(object_fd_);
}

}  // namespace gpufeed
