#include "cache/gather_probe.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "cache/cached_gather.h"
#include "core/format.h"
#include "core/splitmix.h"
#include "gpufeed/cancel.h"

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

namespace {

// Bytes per second of `rows` read from the source, as a loader's worker reads them.
double SourceGatherRate(const Source& source, const std::vector<int64_t>& rows) {
  const Schema& schema = source.schema();
  const size_t row = schema.SampleBytes();
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<std::vector<std::byte>> fields;
  BatchView view;
  view.rows = n;
  for (const auto& f : schema.fields) {
    fields.emplace_back(f.SampleBytes() * static_cast<size_t>(n));
    view.fields.push_back(fields.back().data());
  }
  auto state = source.NewWorkerState();
  // In pieces of a loader batch's size, so that a probe run by a background filler stops
  // within one piece when its loader is closed (Error(kCancelled)).
  constexpr int64_t kPiece = 512;
  return BestOfTwo(static_cast<double>(n) * row, [&] {
    for (int64_t begin = 0; begin < n; begin += kPiece) {
      ThrowIfCancelled("measuring how fast the source gathers");
      const int64_t count = std::min(kPiece, n - begin);
      BatchView piece;
      piece.rows = count;
      for (size_t f = 0; f < view.fields.size(); ++f) {
        piece.fields.push_back(view.fields[f] +
                               static_cast<size_t>(begin) * schema.fields[f].SampleBytes());
      }
      source.Read(std::span(rows).subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
                  piece, state.get());
    }
  });
}

}  // namespace

GatherRates ProbeGatherRates(const Source& source) {
  GatherRates rates;
  const Schema& schema = source.schema();
  const size_t row = schema.SampleBytes();
  const int64_t n = std::min<int64_t>(kProbeRows, source.size());
  if (row == 0 || n == 0) return rates;
  const std::vector<int64_t> rows = RandomRows(source.size(), n, 0x9e3779b97f4a7c15ULL);

  rates.source_bytes_per_s = SourceGatherRate(source, rows);

  // The same random rows from a probe-sized copy of each kind, gathered as both tiers gather
  // (GatherCachedRows, in sample order).
  const int64_t probe_rows =
      std::max<int64_t>(1, std::min<int64_t>(source.size(), kProbeBytes / row));
  const size_t probe_bytes = static_cast<size_t>(probe_rows) * row;
  std::vector<CachedRow> order;
  SortForLocality(RandomRows(probe_rows, n, 0x51ed2701), order);
  std::vector<std::byte> out(static_cast<size_t>(n) * row);
  const BatchView view{.fields = {out.data()}, .rows = n};
  const std::vector<size_t> row_bytes = {row};
  const auto gather_rate = [&](const std::byte* copy) {
    const std::vector<const std::byte*> arrays = {copy};
    return BestOfTwo(static_cast<double>(n) * row,
                     [&] { GatherCachedRows(arrays, row_bytes, order, view); });
  };
  {
    const size_t rounded = (probe_bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p != nullptr) {
      madvise(p, rounded, MADV_HUGEPAGE);
      Fill(static_cast<std::byte*>(p), probe_bytes);
      rates.ram_bytes_per_s = gather_rate(static_cast<const std::byte*>(p));
      std::free(p);
    }
  }
  {
    // The shm tier's copy: a tmpfs file written with pwrite (as the builder writes it), mapped
    // read-only and shared in a mapping of its own (as a reader maps it).
    const int fd = memfd_create("gpufeed-probe", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(probe_bytes)) == 0) {
      void* w = mmap(nullptr, probe_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (w != MAP_FAILED) {
        Fill(static_cast<std::byte*>(w), probe_bytes);
        munmap(w, probe_bytes);
        void* r = mmap(nullptr, probe_bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (r != MAP_FAILED) {
          madvise(r, probe_bytes, MADV_HUGEPAGE);
          rates.shm_bytes_per_s = gather_rate(static_cast<const std::byte*>(r));
          munmap(r, probe_bytes);
        }
      }
    }
    if (fd >= 0) close(fd);
  }
  return rates;
}

}  // namespace gpufeed
