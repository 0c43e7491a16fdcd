#include "cache/shm_source.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The base source's own state, made on the first fallback read, and the scratch space of
// the verified copies.
struct ShmWorkerState : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> base;
  bool made = false;
  std::vector<std::byte> scratch;  // one block of small rows, copied from the file
  std::vector<size_t> order;       // batch positions by sample index
  std::vector<iovec> iov;          // one run of adjacent rows
};

// Adjacent rows read by one preadv: at most this many (IOV_MAX is 1024 on Linux).
constexpr size_t kMaxRunRows = 512;

}  // namespace

ShmCachedSource::ShmCachedSource(std::shared_ptr<Source> base, int fd, std::string path,
                                 ShmHeader header)
    : CachedSource(std::move(base), CacheTier::kShm),
      fd_(fd),
      path_(std::move(path)),
      header_(std::move(header)) {
  // A shared lock for as long as the file is open: `gpufeed cache ls` counts them.
  flock(fd_, LOCK_SH | LOCK_NB);
  const uint64_t words = (header_.layout.blocks + 63) / 64;
  verified_ = std::make_unique<std::atomic<uint64_t>[]>(words);
  for (uint64_t w = 0; w < words; ++w) {
    verified_[w].store(0, std::memory_order_relaxed);
  }
}

ShmCachedSource::~ShmCachedSource() {
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

void ShmCachedSource::ReadExactly(std::byte* dst, uint64_t bytes, uint64_t at) const {
  uint64_t offset = header_.layout.header_bytes + at;
  while (bytes > 0) {
    const ssize_t r = pread(fd_, dst, bytes, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw Error(ErrorCode::kIo,
                  r == 0 ? fmt::format("shared-memory cache {} changed size while being read "
                                       "(truncated at offset {})",
                                       path_, offset)
                         : fmt::format("shared-memory cache {}: read of {} bytes at offset {} "
                                       "failed: {}",
                                       path_, bytes, offset, std::strerror(errno)));
    }
    dst += r;
    bytes -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

bool ShmCachedSource::CopyVerified(std::span<const int64_t> indices, const BatchView& out,
                                   SourceWorkerState* state) const {
  const ShmLayout& layout = header_.layout;
  ShmWorkerState local;
  auto* ws = static_cast<ShmWorkerState*>(state);
  if (ws == nullptr) ws = &local;
  // Rows in sample order: adjacent rows become one preadv, rows of one block one read.
  ws->order.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) ws->order[i] = i;
  std::sort(ws->order.begin(), ws->order.end(),
            [&](size_t a, size_t b) { return indices[a] < indices[b]; });
  const std::vector<size_t>& order = ws->order;
  ws->scratch.resize(kShmBlockBytes);
  for (size_t f = 0; f < layout.row_bytes.size(); ++f) {
    const uint64_t row = layout.row_bytes[f];
    if (row == 0) continue;
    std::byte* dst = out.fields[f];
    if (layout.rows_per_block[f] == 1) {
      // Each row is a block: read runs of adjacent rows straight into their batch
      // positions, then hash each row where it landed.
      size_t k = 0;
      while (k < order.size()) {
        size_t end = k + 1;
        while (end < order.size() && end - k < kMaxRunRows &&
               indices[order[end]] == indices[order[end - 1]] + 1) {
          ++end;
        }
        const uint64_t at = layout.RowBegin(f, indices[order[k]]);
        if (end - k == 1) {
          ReadExactly(dst + order[k] * row, row, at);
        } else {
          ws->iov.resize(end - k);
          for (size_t j = k; j < end; ++j) ws->iov[j - k] = {dst + order[j] * row, row};
          const ssize_t got = preadv(fd_, ws->iov.data(), static_cast<int>(end - k),
                                     static_cast<off_t>(layout.header_bytes + at));
          if (got < 0 || static_cast<uint64_t>(got) != row * (end - k)) {
            // Interrupted or short: read the run row by row (which says why it failed).
            for (size_t j = k; j < end; ++j) {
              ReadExactly(dst + order[j] * row, row, layout.RowBegin(f, indices[order[j]]));
            }
          }
        }
        for (size_t j = k; j < end; ++j) {
          const uint64_t block = layout.BlockOf(f, indices[order[j]]);
          if (HashShmBlock(dst + order[j] * row, row) != header_.block_hashes[block]) {
            return false;
          }
          MarkVerified(block);
        }
        k = end;
      }
      continue;
    }
    // Small rows: read each block the batch touches once into the scratch, hash it, copy
    // its rows out.
    std::byte* scratch = ws->scratch.data();
    uint64_t held = UINT64_MAX;  // the block in scratch (within the field): none
    int64_t held_first = 0;
    for (const size_t pos : order) {
      const int64_t index = indices[pos];
      const uint64_t k = static_cast<uint64_t>(index) / layout.rows_per_block[f];
      if (k != held) {
        held_first = layout.BlockFirstRow(f, k);
        const uint64_t bytes = static_cast<uint64_t>(layout.BlockEndRow(f, k) - held_first) * row;
        ReadExactly(scratch, bytes, layout.RowBegin(f, held_first));
        const uint64_t block = layout.first_block[f] + k;
        if (HashShmBlock(scratch, bytes) != header_.block_hashes[block]) return false;
        MarkVerified(block);
        held = k;
      }
      std::memcpy(dst + pos * row, scratch + static_cast<uint64_t>(index - held_first) * row, row);
    }
  }
  return true;
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
