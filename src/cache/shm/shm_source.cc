#include "cache/shm/shm_source.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cache/cached_gather.h"
#include "core/io/mapped_read_guard.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

struct ShmWorkerState : SourceWorkerState {
  std::vector<CachedRow> order;  // the batch's (sample, row) pairs in sample order
};

}  // namespace

ShmCachedSource::ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path,
                                 ShmHeader header)
    : CachedSource(std::move(base), CacheTier::kShm),
      fd_(fd),
      path_(std::move(path)),
      header_(std::move(header)) {
  const ShmLayout& layout = header_.layout;
  map_bytes_ = static_cast<size_t>(layout.total_bytes);
  // Read-only and shared: every process maps the same tmpfs pages, and none can write them.
  map_ = mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    const int err = errno;
    close(fd_);
    throw Error(ErrorCode::kIo, fmt::format("shared-memory cache {}: cannot map {} bytes: {}",
                                            path_, map_bytes_, std::strerror(err)));
  }
  // A hint: where the folder's tmpfs has huge pages, fewer TLB misses in shuffled gathers.
  madvise(map_, map_bytes_, MADV_HUGEPAGE);
  const auto* data = static_cast<const std::byte*>(map_) + layout.header_bytes;
  for (size_t f = 0; f < layout.row_bytes.size(); ++f) {
    arrays_.push_back(data + layout.field_offsets[f]);
    row_bytes_.push_back(static_cast<size_t>(layout.row_bytes[f]));
  }
  // A shared lock for as long as the file is open: `gpufeed cache ls` counts them.
  flock(fd_, LOCK_SH | LOCK_NB);
  // Its access time says when it was last used (`gpufeed cache gc --older-than`). Best effort:
  // only the owner may set it (a group member reading the builder's file cannot).
  const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  futimens(fd_, times);
}

ShmCachedSource::~ShmCachedSource() {
  munmap(map_, map_bytes_);
  close(fd_);  // drops the shared flock
}

std::string ShmCachedSource::Describe() const {
  return fmt::format("{} (cached in {})", base_->Describe(), path_);
}

std::unique_ptr<SourceWorkerState> ShmCachedSource::NewWorkerState() const {
  return std::make_unique<ShmWorkerState>();
}

void ShmCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                           SourceWorkerState* state) const {
  CheckReadRequest(*this, indices, out);
  ShmWorkerState local;
  auto* ws = state != nullptr ? static_cast<ShmWorkerState*>(state) : &local;
  SortForLocality(indices, ws->order);
  try {
    GuardMappedRead(path_, [&] { GatherCachedRows(arrays_, row_bytes_, ws->order, out); });
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kIo) throw;
    throw Error(ErrorCode::kIo,
                fmt::format("shared-memory cache {} changed size while being read (another "
                            "process truncated or rewrote it); remove it with `gpufeed cache rm` "
                            "and the next open rebuilds it",
                            path_));
  }
}

}  // namespace gpufeed
