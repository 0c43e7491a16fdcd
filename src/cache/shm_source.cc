#include "cache/shm_source.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.h"
#include "core/row_gather.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The base source's own state, made on the first fallback read.
struct ShmWorkerState : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> base;
  bool made = false;
};

}  // namespace

ShmCachedSource::ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path,
                                 ShmHeader header, bool verified)
    : CachedSource(std::move(base), CacheTier::kShm),
      fd_(fd), path_(std::move(path)), header_(std::move(header)) {
  const uint64_t total = header_.layout.total_bytes;
  void* p = mmap(nullptr, total, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd_);
    throw Error(ErrorCode::kIo, fmt::format("shared-memory cache {}: mmap of {} bytes failed: {}",
                                            path_, total, std::strerror(err)));
  }
  map_ = static_cast<const std::byte*>(p);
  data_ = map_ + header_.layout.header_bytes;
  // No MADV_RANDOM: the kernel's fault-around maps a whole 16 KiB block's pages in one fault,
  // and a first batch of random rows takes one fault per block instead of one per page.
  // A shared lock for as long as the file is mapped: `gpufeed cache ls` counts them.
  flock(fd_, LOCK_SH | LOCK_NB);
  const uint64_t words = (header_.layout.blocks + 63) / 64;
  verified_ = std::make_unique<std::atomic<uint64_t>[]>(words);
  for (uint64_t w = 0; w < words; ++w) {
    verified_[w].store(verified ? ~uint64_t{0} : 0, std::memory_order_relaxed);
  }
}

ShmCachedSource::~ShmCachedSource() {
  munmap(const_cast<std::byte*>(map_), header_.layout.total_bytes);
  close(fd_);  // drops the shared flock
}

std::string ShmCachedSource::Describe() const {
  return fmt::format("{} (cached in {})", base_->Describe(), path_);
}

std::unique_ptr<SourceWorkerState> ShmCachedSource::NewWorkerState() const {
  return std::make_unique<ShmWorkerState>();
}

uint64_t ShmCachedSource::verified_blocks() const {
  uint64_t n = 0;
  const uint64_t words = (header_.layout.blocks + 63) / 64;
  for (uint64_t w = 0; w < words; ++w) {
    uint64_t bits = verified_[w].load(std::memory_order_relaxed);
    if (w == words - 1 && header_.layout.blocks % 64 != 0) {
      bits &= (uint64_t{1} << (header_.layout.blocks % 64)) - 1;
    }
    n += std::popcount(bits);
  }
  return n;
}

bool ShmCachedSource::Verify(uint64_t begin, uint64_t end) const {
  if (begin == end) return true;
  const uint64_t first = begin / kShmBlockBytes;
  const uint64_t last = (end - 1) / kShmBlockBytes;
  for (uint64_t b = first; b <= last; ++b) {
    const uint64_t bit = uint64_t{1} << (b % 64);
    // Acquire pairs with the release below, though the bytes themselves never change: the
    // file was complete before it was published.
    if (verified_[b / 64].load(std::memory_order_acquire) & bit) continue;
    const uint64_t at = b * kShmBlockBytes;
    const uint64_t n = std::min(kShmBlockBytes, header_.layout.data_bytes - at);
    if (HashShmBlock(data_ + at, n) != header_.block_hashes[b]) {
      if (!damaged_.exchange(true, std::memory_order_acq_rel)) {
        Log(LogLevel::kWarning,
            fmt::format("cache: WARNING: block {} of {} fails its checksum; reading from the "
                        "source instead (remove it with `gpufeed cache rm`)",
                        b, path_));
      }
      return false;
    }
    verified_[b / 64].fetch_or(bit, std::memory_order_release);
  }
  return true;
}

void ShmCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                           SourceWorkerState* state) const {
  CheckReadRequest(*this, indices, out);
  const ShmLayout& layout = header_.layout;
  bool ok = !damaged();
  for (size_t i = 0; ok && i < indices.size(); ++i) {
    const int64_t index = indices[i];
    for (size_t f = 0; ok && f < layout.row_bytes.size(); ++f) {
      const uint64_t begin = layout.RowBegin(f, index);
      ok = Verify(begin, begin + layout.row_bytes[f]);
    }
  }
  if (!ok) {
    auto* ws = static_cast<ShmWorkerState*>(state);
    SourceWorkerState* base_state = nullptr;
    if (ws != nullptr) {
      if (!ws->made) {
        ws->base = base_->NewWorkerState();
        ws->made = true;
      }
      base_state = ws->base.get();
    }
    std::unique_ptr<SourceWorkerState> local;
    if (ws == nullptr) base_state = (local = base_->NewWorkerState()).get();
    base_->Read(indices, out, base_state);
    return;
  }
  for (size_t f = 0; f < layout.row_bytes.size(); ++f) {
    const size_t row = layout.row_bytes[f];
    const std::byte* field = data_ + layout.field_offsets[f];
    GatherRows(field, row, indices, out.fields[f]);
  }
}

}  // namespace gpufeed
