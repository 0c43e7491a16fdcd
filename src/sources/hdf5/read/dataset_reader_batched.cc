// The reads of a file that does not map (an object in a store, a test's faulty file; a local
// file's rows not yet warm): a call's ranges go to the file in one ReadMany, which a remote
// file has all in flight at once. When it fails, the caller reads the ranges again one by
// one, so that the error names the sample or chunk whose read fails.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <utility>
#include <vector>

#include "gpufeed/error.h"
#include "sources/hdf5/read/dataset_reader.h"

namespace gpufeed {
namespace {

// A contiguous run of neighbouring samples is one range up to this size.
constexpr size_t kMaxRunBytes = size_t{4} << 20;
// The stored chunks a call needs are fetched together, up to this many bytes at a time.
constexpr size_t kMaxFetchBytes = size_t{64} << 20;

}  // namespace

void Hdf5DatasetReader::ReadContiguousRuns(std::span<const Hdf5RowTarget> rows,
                                           Hdf5ReadScratch& scratch) const {
  // Neighbouring samples are read together, and every run of the call with one ReadMany (a
  // remote file has them all in flight at once); a run of several rows lands in the slab.
  const size_t rb = sample_bytes_;
  const size_t max_rows = std::max<size_t>(1, kMaxRunBytes / rb);
  std::vector<std::pair<size_t, size_t>> runs;  // (first row, rows)
  size_t slab_bytes = 0;
  for (size_t k = 0; k < rows.size();) {
    size_t end = k + 1;
    while (end < rows.size() && end - k < max_rows &&
           rows[end].local == rows[k].local + static_cast<int64_t>(end - k)) {
      ++end;
    }
    runs.emplace_back(k, end - k);
    if (end - k > 1) slab_bytes += (end - k) * rb;
    k = end;
  }
  scratch.slab.resize(slab_bytes);
  std::vector<ReadRange> ranges;
  ranges.reserve(runs.size());
  size_t at = 0;
  uint64_t total = 0;
  for (const auto& [k, n] : runs) {
    const uint64_t offset = ds_.contiguous_address + static_cast<uint64_t>(rows[k].local) * rb;
    ranges.push_back(
        {offset, n == 1 ? static_cast<void*>(rows[k].dst) : scratch.slab.data() + at, n * rb});
    if (n > 1) at += n * rb;
    total += n * rb;
  }
  try {
    file_->ReadMany(ranges, "the data");
  } catch (const Error&) {
    // Read again run by run, so that the error names the sample that fails.
    for (const auto& [k, n] : runs) ReadContiguousRun(rows.subspan(k, n), scratch);
    return;
  }
  scratch.counters.bytes_read += static_cast<int64_t>(total);
  at = 0;
  for (const auto& [k, n] : runs) {
    if (n == 1) continue;
    for (size_t j = 0; j < n; ++j)
      std::memcpy(rows[k + j].dst, scratch.slab.data() + at + j * rb, rb);
    at += n * rb;
  }
}

void Hdf5DatasetReader::ReadContiguousRun(std::span<const Hdf5RowTarget> run,
                                          Hdf5ReadScratch& scratch) const {
  const size_t rb = sample_bytes_;
  const uint64_t offset = ds_.contiguous_address + static_cast<uint64_t>(run[0].local) * rb;
  try {
    scratch.slab.resize(run.size() * rb);
    ReadBytes(offset, scratch.slab.data(), run.size() * rb, scratch);
    for (size_t j = 0; j < run.size(); ++j) {
      std::memcpy(run[j].dst, scratch.slab.data() + j * rb, rb);
    }
  } catch (const Error& e) {
    throw Error(e.code(),
                fmt::format("{}: dataset {}: cannot read sample {} (row {} of the "
                            "file, offset {}): {}",
                            ds_.path, ds_.dataset, run[0].global, run[0].local, offset, e.what()));
  }
}

size_t Hdf5DatasetReader::FetchChunks(std::span<const Hdf5RowTarget> rows, size_t k,
                                      Hdf5ReadScratch& scratch) const {
  const int64_t per_chunk = geometry_.samples_per_chunk();
  const size_t columns = geometry_.columns();
  scratch.fetched_chunks.clear();
  std::vector<ReadRange> ranges;
  size_t bytes = 0;
  while (k < rows.size()) {
    const int64_t chunk_row = rows[k].local / per_chunk;
    const size_t end = ChunkRowEnd(rows, k);
    size_t row_bytes = 0;
    const size_t first_new = scratch.fetched_chunks.size();
    for (size_t col = 0; col < columns; ++col) {
      const size_t linear = static_cast<size_t>(chunk_row) * columns + col;
      const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
      // A chunk the cache holds is marked used by this batch, which keeps it until the batch
      // ends: it is decoded from there, not fetched.
      if (e.size == 0 || scratch.cache.Find(CacheKey(linear))) continue;
      scratch.fetched_chunks.emplace_back(linear, bytes + row_bytes);
      ranges.push_back({e.address, nullptr, static_cast<size_t>(e.size)});
      row_bytes += e.size;
    }
    if (bytes > 0 && bytes + row_bytes > kMaxFetchBytes) {  // the next call fetches this row
      scratch.fetched_chunks.resize(first_new);
      ranges.resize(first_new);
      break;
    }
    bytes += row_bytes;
    k = end;
  }
  scratch.fetched.resize(bytes);
  for (size_t i = 0; i < ranges.size(); ++i) {
    ranges[i].buf = scratch.fetched.data() + scratch.fetched_chunks[i].second;
  }
  try {
    file_->ReadMany(ranges, "chunk data");
    scratch.counters.bytes_read += static_cast<int64_t>(bytes);
  } catch (const Error&) {
    // Each chunk is read again alone, so that the error names the chunk and the sample.
    scratch.fetched_chunks.clear();
  }
  return k;
}

std::span<const std::byte> Hdf5DatasetReader::FetchedChunk(size_t linear,
                                                           Hdf5ReadScratch& scratch) const {
  const auto& fetched = scratch.fetched_chunks;
  const auto it = std::lower_bound(fetched.begin(), fetched.end(), linear,
                                   [](const auto& f, size_t l) { return f.first < l; });
  if (it == fetched.end() || it->first != linear) return {};
  return std::span<const std::byte>(scratch.fetched)
      .subspan(it->second, ds_.chunks.at(linear).size);
}

bool Hdf5DatasetReader::ReadsChunkWhole(std::span<const Hdf5RowTarget> rows, size_t linear,
                                        const DecodedChunkCache& cache) const {
  const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
  const int64_t per_chunk = geometry_.samples_per_chunk();
  // At least an 8th of the chunk's rows, spanning 3/4 of it: their pieces' merged request
  // reads about as much (a few rows far apart are read alone, not with the chunk).
  const auto count = static_cast<int64_t>(rows.size());
  const int64_t span = rows.back().local - rows.front().local + 1;
  return keeps_chunks_ && e.size == ds_.ChunkBytes() && cache.Fits(e.size) &&
         8 * count >= per_chunk && 4 * span >= 3 * per_chunk;
}

void Hdf5DatasetReader::CopyChunkRows(const std::byte* chunk, std::span<const Hdf5RowTarget> rows,
                                      size_t col) const {
  const int64_t row_start =
      rows.front().local / geometry_.samples_per_chunk() * geometry_.samples_per_chunk();
  const size_t slab = geometry_.slab_bytes();
  for (const auto& r : rows) {
    const std::byte* src = chunk + static_cast<size_t>(r.local - row_start) * slab;
    for (const auto& run : geometry_.runs(col)) {
      std::memcpy(r.dst + run.dst, src + run.src, run.len);
    }
  }
}

void Hdf5DatasetReader::PlanPieces(std::span<const Hdf5RowTarget> rows, Hdf5PiecePlan& plan,
                                   Hdf5ReadScratch& scratch) const {
  const Hdf5ChunkGeometry& geo = geometry_;
  const int64_t per_chunk = geo.samples_per_chunk();
  const size_t columns = geo.columns();
  const size_t slab = geo.slab_bytes();
  plan.rows.assign(rows.begin(), rows.end());
  plan.ranges.clear();
  plan.split.clear();
  DropPieces(plan);
  // Each sample's piece of each stored chunk: one range, straight into the row when the piece
  // is one run, else into the slab (then copied run by run). A chunk the batch reads most of
  // is read whole and kept in the chunk cache: the next batches drawing from it (block
  // shuffle) copy from there instead of sending its bytes again.
  std::vector<size_t> split_range;  // the range of each split piece
  size_t slab_bytes = 0;
  for (size_t k = 0; k < rows.size();) {
    const int64_t chunk_row = rows[k].local / per_chunk;
    const size_t end = ChunkRowEnd(rows, k);
    const int64_t row_start = chunk_row * per_chunk;
    const auto group = rows.subspan(k, end - k);
    for (size_t col = 0; col < columns; ++col) {
      const size_t linear = static_cast<size_t>(chunk_row) * columns + col;
      const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
      const auto& runs = geo.runs(col);
      if (e.size != 0) {
        // A chunk another worker is fetching is waited for, even by a batch reading a few of
        // its rows: its bytes are on their way, and asking again only adds requests.
        ChunkLookup look =
            scratch.cache.Lookup(CacheKey(linear), ReadsChunkWhole(group, linear, scratch.cache));
        if (look.held) {
          ++scratch.counters.chunk_cache_hits;
          CopyChunkRows(look.held->data(), group, col);
          continue;
        }
        if (look.pending.valid()) {
          plan.awaited.push_back({linear, k, end, col, std::move(look.pending)});
          continue;
        }
        if (look.fetch) {
          auto bytes = scratch.cache.NewBuffer(e.size);
          plan.ranges.push_back({e.address, bytes->data(), static_cast<size_t>(e.size)});
          plan.whole.push_back({linear, k, end, col, std::move(bytes), std::move(look.fetch)});
          continue;
        }
      }
      for (size_t j = k; j < end; ++j) {
        if (e.size == 0) {  // never written: the fill value
          for (const auto& run : runs) Fill(rows[j].dst + run.dst, run.len);
          continue;
        }
        const size_t lo = runs.front().src;
        const size_t hi = runs.back().src + runs.back().len;
        const uint64_t offset =
            e.address + static_cast<uint64_t>(rows[j].local - row_start) * slab + lo;
        if (runs.size() == 1) {
          plan.ranges.push_back({offset, rows[j].dst + runs[0].dst, runs[0].len});
        } else {
          plan.split.push_back({j, col, slab_bytes});
          split_range.push_back(plan.ranges.size());
          plan.ranges.push_back({offset, nullptr, hi - lo});
          slab_bytes += hi - lo;
        }
      }
    }
    k = end;
  }
  plan.slab.resize(slab_bytes);
  for (size_t i = 0; i < plan.split.size(); ++i) {
    plan.ranges[split_range[i]].buf = plan.slab.data() + plan.split[i].slab_at;
  }
  plan.bytes = 0;
  for (const ReadRange& r : plan.ranges) plan.bytes += r.n;
}

void Hdf5DatasetReader::PlacePieces(Hdf5PiecePlan& plan, Hdf5ReadScratch& scratch) const {
  scratch.counters.bytes_read += static_cast<int64_t>(plan.bytes);
  for (const Hdf5PiecePlan::Split& p : plan.split) {
    const auto& runs = geometry_.runs(p.col);
    const std::byte* src = plan.slab.data() + p.slab_at - runs.front().src;
    for (const auto& run : runs) {
      std::memcpy(plan.rows[p.row].dst + run.dst, src + run.src, run.len);
    }
  }
  for (Hdf5PiecePlan::Whole& w : plan.whole) {
    if (w.end > w.first) {  // else read ahead for a later batch
      CopyChunkRows(w.bytes->data(), std::span(plan.rows).subspan(w.first, w.end - w.first), w.col);
    }
    w.fetch.Finish(std::move(w.bytes));  // kept, and handed to the workers waiting for it
  }
  plan.whole.clear();
}

void Hdf5DatasetReader::ClaimAhead(std::span<const Hdf5RowTarget> rows, DecodedChunkCache& cache,
                                   uint64_t max_bytes, Hdf5ReadAhead& ahead) const {
  const int64_t per_chunk = geometry_.samples_per_chunk();
  const size_t columns = geometry_.columns();
  for (size_t k = 0; k < rows.size();) {
    const int64_t chunk_row = rows[k].local / per_chunk;
    const size_t end = ChunkRowEnd(rows, k);
    const auto group = rows.subspan(k, end - k);
    k = end;
    for (size_t col = 0; col < columns; ++col) {
      const size_t linear = static_cast<size_t>(chunk_row) * columns + col;
      const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
      if (e.size == 0 || !ReadsChunkWhole(group, linear, cache)) continue;
      if (ahead.bytes + e.size > max_bytes) return;
      ChunkFetch fetch = cache.Claim(CacheKey(linear));
      if (!fetch) continue;  // held, or being fetched
      ahead.bytes += e.size;
      ahead.buffers.push_back(cache.NewBuffer(e.size));
      ahead.ranges.push_back(
          {e.address, ahead.buffers.back()->data(), static_cast<size_t>(e.size)});
      ahead.fetches.push_back(std::move(fetch));
    }
  }
}

void Hdf5DatasetReader::AwaitPieces(Hdf5PiecePlan& plan, Hdf5ReadScratch& scratch) const {
  for (Hdf5PiecePlan::Awaited& a : plan.awaited) {
    const auto rows = std::span<const Hdf5RowTarget>(plan.rows).subspan(a.first, a.end - a.first);
    std::shared_ptr<const ChunkBytes> chunk;
    try {
      chunk = a.chunk.get();
    } catch (const std::future_error&) {
      // The fetching worker could not even end its claim: as a failed fetch.
    }
    if (chunk != nullptr) {
      ++scratch.counters.chunk_cache_hits;
      CopyChunkRows(chunk->data(), rows, a.col);
    } else {
      ReadPiecesAlone(rows, a.linear, a.col, scratch);
    }
  }
  plan.awaited.clear();
}

void Hdf5DatasetReader::FinishPieces(Hdf5PiecePlan& plan, Hdf5ReadScratch& scratch) const {
  AwaitPieces(plan, scratch);
  FinishRows(plan.rows);
}

void Hdf5DatasetReader::DropPieces(Hdf5PiecePlan& plan) {
  plan.whole.clear();  // each claim abandoned
  plan.awaited.clear();
}

void Hdf5DatasetReader::ReadPiecesAlone(std::span<const Hdf5RowTarget> rows, size_t linear,
                                        size_t col, Hdf5ReadScratch& scratch) const {
  const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
  const auto& runs = geometry_.runs(col);
  const int64_t row_start =
      rows.front().local / geometry_.samples_per_chunk() * geometry_.samples_per_chunk();
  const size_t lo = runs.front().src;
  const size_t hi = runs.back().src + runs.back().len;
  for (const auto& r : rows) {
    const uint64_t offset =
        e.address + static_cast<uint64_t>(r.local - row_start) * geometry_.slab_bytes();
    try {
      if (runs.size() == 1) {
        ReadBytes(offset + lo, r.dst + runs[0].dst, runs[0].len, scratch);
      } else {
        scratch.slab.resize(hi - lo);
        ReadBytes(offset + lo, scratch.slab.data(), hi - lo, scratch);
        for (const auto& run : runs) {
          std::memcpy(r.dst + run.dst, scratch.slab.data() + (run.src - lo), run.len);
        }
      }
    } catch (const Error& err) {
      throw Error(err.code(), fmt::format("{}: dataset {}: {}: cannot read sample {}: {}", ds_.path,
                                          ds_.dataset, ChunkName(linear), r.global, err.what()));
    }
  }
}

bool Hdf5DatasetReader::ReadChunkedPieces(std::span<const Hdf5RowTarget> rows,
                                          Hdf5ReadScratch& scratch) const {
  Hdf5PiecePlan plan;
  PlanPieces(rows, plan, scratch);
  try {
    file_->ReadMany(plan.ranges, "chunk data");
  } catch (const Error&) {
    DropPieces(plan);
    return false;
  }
  PlacePieces(plan, scratch);
  AwaitPieces(plan, scratch);  // Read finishes the rows itself
  return true;
}

}  // namespace gpufeed
