#include "cache/gather_probe.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "cache/shm_format.h"
#include "core/format.h"
#include "core/splitmix.h"

namespace gpufeed {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kProbeBytes = size_t{16} << 20;

// Bytes per second of the better of two runs of `gather` over `bytes`: the second finds the
// rows in the page cache and the pages mapped, as every epoch after the first does.
template <typename Gather>
double BestOfTwo(double bytes, Gather&& gather) {
  double best = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    gather();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, bytes / s);
  }
  return best;
}

// `count` distinct-ish random rows below `rows`, sorted (as sources and caches read them).
std::vector<int64_t> RandomRows(int64_t rows, int64_t count, uint64_t seed) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<int64_t>(Mix64(seed + i) % static_cast<uint64_t>(rows));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Fills `n` bytes with something other than zero pages (a page never written reads from the
// shared zero page, which would flatter the gather).
void Fill(std::byte* p, size_t n) {
  for (size_t at = 0; at < n; at += 64) p[at] = std::byte(at >> 6);
}

}  // namespace

std::string GatherRates::ToString() const {
  std::string text = fmt::format("source {}/s, RAM copy {}/s", FormatBytes(source_bytes_per_s),
                                 FormatBytes(ram_bytes_per_s));
  if (shm_bytes_per_s > 0) text += fmt::format(", shm copy {}/s", FormatBytes(shm_bytes_per_s));
  return text;
}

GatherRates ProbeGatherRates(const Source& source) {
  GatherRates rates;
  const Schema& schema = source.schema();
  const size_t row = schema.SampleBytes();
  const int64_t n = std::min<int64_t>(kProbeRows, source.size());
  if (row == 0 || n == 0) return rates;
  const std::vector<int64_t> rows = RandomRows(source.size(), n, 0x9e3779b97f4a7c15ULL);

  // The source, as a loader's worker reads it.
  {
    std::vector<std::vector<std::byte>> fields;
    BatchView view;
    view.rows = n;
    for (const auto& f : schema.fields) {
      fields.emplace_back(f.SampleBytes() * static_cast<size_t>(n));
      view.fields.push_back(fields.back().data());
    }
    auto state = source.NewWorkerState();
    rates.source_bytes_per_s =
        BestOfTwo(static_cast<double>(n) * row, [&] { source.Read(rows, view, state.get()); });
  }

  // The same number of random rows from a probe-sized copy of each kind.
  const int64_t probe_rows =
      std::max<int64_t>(1, std::min<int64_t>(source.size(), kProbeBytes / row));
  const size_t probe_bytes = static_cast<size_t>(probe_rows) * row;
  const std::vector<int64_t> probe = RandomRows(probe_rows, n, 0x51ed2701);
  std::vector<std::byte> out(static_cast<size_t>(n) * row);
  {
    const size_t rounded = (probe_bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p != nullptr) {
      madvise(p, rounded, MADV_HUGEPAGE);
      auto* ram = static_cast<std::byte*>(p);
      Fill(ram, probe_bytes);
      rates.ram_bytes_per_s = BestOfTwo(static_cast<double>(n) * row, [&] {
        for (int64_t i = 0; i < n; ++i) {
          std::memcpy(out.data() + static_cast<size_t>(i) * row,
                      ram + static_cast<size_t>(probe[static_cast<size_t>(i)]) * row, row);
        }
      });
      std::free(p);
    }
  }
  {
    const int fd = memfd_create("gpufeed-probe", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(probe_bytes)) == 0) {
      void* w = mmap(nullptr, probe_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (w != MAP_FAILED) {
        Fill(static_cast<std::byte*>(w), probe_bytes);
        munmap(w, probe_bytes);
        // The shm tier's read (ShmCachedSource::CopyVerified): the rows in sample order, each
        // row (or each block of small rows) copied by pread into private memory and hashed
        // there; small rows are then copied out of their block.
        const uint64_t per = ShmRowsPerBlock(row);
        std::vector<int64_t> sorted(probe.begin(), probe.end());
        std::sort(sorted.begin(), sorted.end());
        std::vector<std::byte> block(kShmBlockBytes);
        uint64_t sink = 0;
        bool failed = false;
        auto read = [&](std::byte* dst, size_t bytes, uint64_t at) {
          if (pread(fd, dst, bytes, static_cast<off_t>(at)) != static_cast<ssize_t>(bytes)) {
            failed = true;
          }
        };
        rates.shm_bytes_per_s = BestOfTwo(static_cast<double>(n) * row, [&] {
          uint64_t held = UINT64_MAX;
          for (int64_t i = 0; i < n; ++i) {
            const auto index = static_cast<uint64_t>(sorted[static_cast<size_t>(i)]);
            std::byte* dst = out.data() + static_cast<size_t>(i) * row;
            if (per == 1) {
              read(dst, row, index * row);
              sink += HashShmBlock(dst, row);
              continue;
            }
            const uint64_t k = index / per;
            const uint64_t first = k * per;
            if (k != held) {
              const uint64_t in_block =
                  std::min<uint64_t>(static_cast<uint64_t>(probe_rows), first + per) - first;
              read(block.data(), in_block * row, first * row);
              sink += HashShmBlock(block.data(), in_block * row);
              held = k;
            }
            std::memcpy(dst, block.data() + (index - first) * row, row);
          }
        });
        // (sink == 1 keeps the hashes from being optimized out.)
        if (failed || sink == 1) rates.shm_bytes_per_s = 0;
      }
    }
    if (fd >= 0) close(fd);
  }
  return rates;
}

}  // namespace gpufeed
