#include "cache/shm_source.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.h"
#include "core/mapped_read_guard.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The base source's own state, made on the first fallback read, and the scratch space of
// the verified copies.
struct ShmWorkerState : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> base;
  bool made = false;
  std::vector<std::byte> scratch;  // a run of whole blocks, copied from the mapping
  std::vector<size_t> order;       // batch positions by sample index
};

}  // namespace

ShmCachedSource::ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path,
                                 ShmHeader header)
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
    verified_[w].store(0, std::memory_order_relaxed);
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

void ShmCachedSource::MarkVerified(uint64_t block) const {
  verified_[block / 64].fetch_or(uint64_t{1} << (block % 64), std::memory_order_relaxed);
}

bool ShmCachedSource::CopyVerified(std::span<const int64_t> indices, const BatchView& out,
                                   SourceWorkerState* state) const {
  const ShmLayout& layout = header_.layout;
  ShmWorkerState local;
  auto* ws = static_cast<ShmWorkerState*>(state);
  if (ws == nullptr) ws = &local;
  // Rows in sample order, so neighbours share the blocks already copied and checked.
  ws->order.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) ws->order[i] = i;
  std::sort(ws->order.begin(), ws->order.end(),
            [&](size_t a, size_t b) { return indices[a] < indices[b]; });
  uint64_t max_row = 0;
  for (uint64_t row : layout.row_bytes) max_row = std::max(max_row, row);
  // A row spans at most this many blocks: sized before the guarded copy, which must not
  // allocate (a fault leaves it by a jump).
  ws->scratch.resize((max_row / kShmBlockBytes + 2) * kShmBlockBytes);
  std::byte* scratch = ws->scratch.data();
  const std::vector<size_t>& order = ws->order;
  bool ok = true;
  GuardMappedRead(path_, [&] {
    for (size_t f = 0; ok && f < layout.row_bytes.size(); ++f) {
      const uint64_t row = layout.row_bytes[f];
      if (row == 0) continue;
      std::byte* dst = out.fields[f];
      uint64_t held_first = 1, held_last = 0;  // the blocks in scratch: none
      for (size_t k = 0; ok && k < order.size(); ++k) {
        const size_t pos = order[k];
        const uint64_t begin = layout.RowBegin(f, indices[pos]);
        const uint64_t first = begin / kShmBlockBytes;
        const uint64_t last = (begin + row - 1) / kShmBlockBytes;
        if (first < held_first || last > held_last) {
          // Copy, then hash the copy: what is served is exactly what was checked.
          const uint64_t from = first * kShmBlockBytes;
          const uint64_t to = std::min(layout.data_bytes, (last + 1) * kShmBlockBytes);
          std::memcpy(scratch, data_ + from, to - from);
          for (uint64_t b = first; b <= last; ++b) {
            const uint64_t at = b * kShmBlockBytes;
            const uint64_t n = std::min(kShmBlockBytes, layout.data_bytes - at);
            if (HashShmBlock(scratch + (at - from), n) != header_.block_hashes[b]) {
              ok = false;
              break;
            }
            MarkVerified(b);
          }
          held_first = first;
          held_last = last;
        }
        if (!ok) break;
        std::memcpy(dst + pos * row, scratch + (begin - held_first * kShmBlockBytes), row);
      }
    }
  });
  return ok;
}

void ShmCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                           SourceWorkerState* state) const {
  CheckReadRequest(*this, indices, out);
  if (!damaged() && CopyVerified(indices, out, state)) return;
  if (!damaged_.exchange(true, std::memory_order_acq_rel)) {
    Log(LogLevel::kWarning,
        fmt::format("cache: WARNING: {} fails its checksum (damaged or rewritten); reading "
                    "from the source instead (remove it with `gpufeed cache rm`)",
                    path_));
  }
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
}

}  // namespace gpufeed
