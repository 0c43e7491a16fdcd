#include "sources/hdf5/read/dataset_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "core/io/mapped_read_guard.h"
#include "core/nvtx.h"
#include "core/row_gather.h"
#include "gpufeed/error.h"
#include "sources/hdf5/filters/filters.h"
#include "sources/hdf5/format/dtype.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/compound.h"

namespace gpufeed {
namespace {

void SwapElements(std::byte* p, size_t bytes, size_t element_size) {
  for (size_t i = 0; i + element_size <= bytes; i += element_size) {
    std::reverse(p + i, p + i + element_size);
  }
}

}  // namespace

Hdf5DatasetReader::Hdf5DatasetReader(Hdf5Dataset dataset, const File* file, uint32_t cache_tag)
    : ds_(std::move(dataset)),
      file_(file),
      cache_tag_(cache_tag),
      sample_bytes_(ds_.field.SampleBytes()) {
  if (ds_.storage == Hdf5Storage::kChunked) {
    geometry_ = Hdf5ChunkGeometry(ds_.dims, ds_.chunk_dims, ds_.element_size);
    if (!ds_.filtered() && sample_bytes_ > 0) chunk_map_ = file_->Map();
  }
  if (ds_.storage == Hdf5Storage::kLibrary) {
    Hdf5Lock lock;
    const std::string what = fmt::format("{}: dataset {}", ds_.path, ds_.dataset);
    CheckHdf5DatasetMemoryType(ds_, what);
  }
  // Where the file does not map (a remote object, a test's faulty file), ranges in flight
  // together pay one latency; a local file reads a chunk just before it is decoded.
  fetch_chunks_ = ds_.storage == Hdf5Storage::kChunked && ds_.filtered() && file_->Map() == nullptr;
  plans_pieces_ = ds_.storage == Hdf5Storage::kChunked && !ds_.filtered() && sample_bytes_ > 0 &&
                  chunk_map_ == nullptr;
  // A file read together with the other objects of its store: a remote one.
  keeps_chunks_ = plans_pieces_ && file_->BatchKey() != nullptr;
  zero_fill_ = std::all_of(ds_.fill_value.begin(), ds_.fill_value.end(),
                           [](std::byte b) { return b == std::byte{0}; });
  if (ds_.storage == Hdf5Storage::kContiguous && sample_bytes_ > 0) {
    // The open checked the data's range against the file's size.
    if (const std::byte* map = file_->Map(); map != nullptr) {
      file_->PreferHugePages(ds_.contiguous_address,
                             sample_bytes_ * static_cast<uint64_t>(ds_.samples));
      warm_ = std::make_unique<WarmedMapping>(
          map, ds_.contiguous_address,
          ds_.contiguous_address + sample_bytes_ * static_cast<uint64_t>(ds_.samples),
          file_->path());
    }
  }
}

std::string Hdf5DatasetReader::ChunkName(size_t linear) const {
  std::vector<int64_t> coords(ds_.chunk_grid.size());
  size_t rest = linear;
  for (size_t d = coords.size(); d-- > 0;) {
    const auto g = static_cast<size_t>(ds_.chunk_grid[d]);
    coords[d] = static_cast<int64_t>(rest % g) * ds_.chunk_dims[d];
    rest /= g;
  }
  const int64_t first = coords.empty() ? 0 : coords[0];
  const int64_t last = std::min(first + ds_.chunk_dims[0], ds_.samples) - 1;
  const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
  return fmt::format("chunk {} at [{}] (samples {}..{}, file offset {}, {} bytes)", linear,
                     fmt::join(coords, ","), first, last, e.address, e.size);
}

void Hdf5DatasetReader::Fill(std::byte* dst, size_t bytes) const {
  if (zero_fill_) {
    std::memset(dst, 0, bytes);
    return;
  }
  const size_t es = ds_.element_size;
  for (size_t i = 0; i + es <= bytes; i += es) std::memcpy(dst + i, ds_.fill_value.data(), es);
}

void Hdf5DatasetReader::ReadBytes(uint64_t offset, void* dst, size_t n,
                                  Hdf5ReadScratch& scratch) const {
  scratch.counters.bytes_read += static_cast<int64_t>(n);
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const size_t got = file_->ReadAt(offset + done, out + done, n - done);
    if (got == 0) {
      // Open checked this range against the file's size then: the file shrank since.
      throw Error(ErrorCode::kIo,
                  fmt::format("{}: changed size while being read: it ends before byte {} (it "
                              "had {} bytes when opened); was it truncated or rewritten?",
                              file_->path(), offset + n, file_->Size()));
    }
    done += got;
  }
}

void Hdf5DatasetReader::Read(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const {
  switch (ds_.storage) {
    case Hdf5Storage::kContiguous:
      ReadContiguous(rows, scratch);
      break;
    case Hdf5Storage::kChunked:
      ReadChunked(rows, scratch);
      break;
    case Hdf5Storage::kInMemory:
      CopyRows(
          rows.size(), sample_bytes_,
          [&](size_t j) {
            return ds_.in_memory.data() + static_cast<size_t>(rows[j].local) * sample_bytes_;
          },
          [&](size_t j) { return rows[j].dst; });
      break;
    case Hdf5Storage::kFill:
      for (const auto& r : rows) Fill(r.dst, sample_bytes_);
      break;
    case Hdf5Storage::kLibrary:
      ReadLibrary(rows, scratch);
      break;
  }
  FinishRows(rows);
}

size_t Hdf5DatasetReader::ChunkRowEnd(std::span<const Hdf5RowTarget> rows, size_t k) const {
  const int64_t per_chunk = geometry_.samples_per_chunk();
  const int64_t chunk_row = rows[k].local / per_chunk;
  size_t end = k + 1;
  while (end < rows.size() && rows[end].local / per_chunk == chunk_row) ++end;
  return end;
}

void Hdf5DatasetReader::FinishRows(std::span<const Hdf5RowTarget> rows) const {
  if (ds_.big_endian) {
    for (const auto& r : rows) SwapElements(r.dst, sample_bytes_, ds_.element_size);
  }
  if (ds_.bitfield && ds_.field.dtype == DType::kBool) CheckBools(rows);
}

void Hdf5DatasetReader::CheckBools(std::span<const Hdf5RowTarget> rows) const {
  for (const auto& r : rows) {
    const auto* p = reinterpret_cast<const uint8_t*>(r.dst);
    const auto* bad = std::find_if(p, p + sample_bytes_, [](uint8_t b) { return b > 1; });
    if (bad == p + sample_bytes_) continue;
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: dataset {}: sample {} (row {} of the file): the 8-bit bitfield "
                            "holds {}, which is not a bool (0 or 1); gpufeed reads 8-bit "
                            "bitfields as bool",
                            ds_.path, ds_.dataset, r.global, r.local, static_cast<int>(*bad)));
  }
}

void Hdf5DatasetReader::ReadContiguous(std::span<const Hdf5RowTarget> rows,
                                       Hdf5ReadScratch& scratch) const {
  const size_t rb = sample_bytes_;
  if (rb == 0) return;
  size_t k = 0;
  if (warm_) {
    // The sorted rows below the warm boundary come from the mapping.
    warm_->StartWarming();
    const uint64_t warm = warm_->WarmEnd();
    while (k < rows.size() &&
           ds_.contiguous_address + (static_cast<uint64_t>(rows[k].local) + 1) * rb <= warm) {
      ++k;
    }
    const std::byte* map = warm_->map() + ds_.contiguous_address;
    GuardMappedRead(file_->path(), [&] {
      CopyRows(
          k, rb, [&](size_t j) { return map + static_cast<size_t>(rows[j].local) * rb; },
          [&](size_t j) { return rows[j].dst; });
    });
    scratch.counters.bytes_read += static_cast<int64_t>(k * rb);
  }
  if (k < rows.size()) ReadContiguousRuns(rows.subspan(k), scratch);
}

const std::byte* Hdf5DatasetReader::DecodedChunk(size_t linear, const Hdf5RowTarget& first,
                                                 Hdf5ReadScratch& scratch,
                                                 DecodedChunkCache::Buffer& hold) const {
  const uint64_t key = CacheKey(linear);
  if ((hold = scratch.cache.Find(key)) != nullptr) {
    ++scratch.counters.chunk_cache_hits;
    return hold->data();
  }
  const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
  const size_t bytes = ds_.ChunkBytes();
  std::span<std::byte> target;
  std::shared_ptr<ChunkBytes> kept;
  if (scratch.cache.Fits(bytes)) {
    kept = scratch.cache.NewBuffer(bytes);
    target = *kept;
  } else {
    scratch.decoded.resize(bytes);
    target = scratch.decoded;
  }
  try {
    std::span<const std::byte> raw = FetchedChunk(linear, scratch);
    if (raw.empty()) {
      scratch.raw.resize(e.size);
      ReadBytes(e.address, scratch.raw.data(), e.size, scratch);
      raw = scratch.raw;
    }
    ScopedDecode timed;  // the loader's trace shows decode time inside the batch's read
    DecodeHdf5Chunk(raw, ds_.filters, e.filter_mask, ds_.element_size, target, scratch.inflate);
  } catch (const Error& err) {
    throw Error(err.code(), fmt::format("{}: dataset {}: {}: {} (reading sample {})", ds_.path,
                                        ds_.dataset, ChunkName(linear), err.what(), first.global));
  }
  ++scratch.counters.chunks_decoded;
  if (kept) {
    scratch.cache.Insert(key, kept);
    hold = std::move(kept);
  }
  return target.data();
}

void Hdf5DatasetReader::ReadChunkedMapped(std::span<const Hdf5RowTarget> rows,
                                          Hdf5ReadScratch& scratch) const {
  const Hdf5ChunkGeometry& geo = geometry_;
  const int64_t per_chunk = geo.samples_per_chunk();
  const size_t columns = geo.columns();
  const size_t slab = geo.slab_bytes();
  int64_t bytes = 0;
  // One guard for the whole call (a guard costs a sigprocmask); inside, only copies and fills.
  // Bounds: open checked each stored chunk to hold exactly the chunk's bytes and to lie inside
  // the file; a row's slab and its runs lie inside the chunk by the geometry's construction.
  GuardMappedRead(file_->path(), [&] {
    size_t k = 0;
    while (k < rows.size()) {
      // The rows of one chunk row, then column by column: each chunk's pieces for all of
      // them while the chunk's pages are in the TLB.
      const int64_t chunk_row = rows[k].local / per_chunk;
      const size_t end = ChunkRowEnd(rows, k);
      const int64_t row_start = chunk_row * per_chunk;
      for (size_t col = 0; col < columns; ++col) {
        const Hdf5ChunkEntry& e = ds_.chunks.at(static_cast<size_t>(chunk_row) * columns + col);
        const auto runs = geo.runs(col);
        for (size_t j = k; j < end; ++j) {
          std::byte* dst = rows[j].dst;
          if (e.size == 0) {  // never written: the fill value
            for (const auto& run : runs) Fill(dst + run.dst, run.len);
            continue;
          }
          const std::byte* src =
              chunk_map_ + e.address + static_cast<size_t>(rows[j].local - row_start) * slab;
          for (const auto& run : runs) {
            std::memcpy(dst + run.dst, src + run.src, run.len);
            bytes += static_cast<int64_t>(run.len);
          }
        }
      }
      k = end;
    }
  });
  scratch.counters.bytes_read += bytes;
}

void Hdf5DatasetReader::ReadChunked(std::span<const Hdf5RowTarget> rows,
                                    Hdf5ReadScratch& scratch) const {
  if (chunk_map_ != nullptr) {
    ReadChunkedMapped(rows, scratch);
    return;
  }
  const Hdf5ChunkGeometry& geo = geometry_;
  const int64_t per_chunk = geo.samples_per_chunk();
  const size_t columns = geo.columns();
  const size_t slab = geo.slab_bytes();
  // Unfiltered pieces all in one ReadMany; when it fails, read one by one below, so that the
  // error names the chunk and sample.
  if (!ds_.filtered() && ReadChunkedPieces(rows, scratch)) return;
  size_t k = 0;
  size_t fetched_to = 0;  // the stored chunks of rows [.., fetched_to) are fetched
  while (k < rows.size()) {
    if (fetch_chunks_ && k >= fetched_to) fetched_to = FetchChunks(rows, k, scratch);
    // The rows of one chunk row (same chunk position along axis 0).
    const int64_t chunk_row = rows[k].local / per_chunk;
    const size_t end = ChunkRowEnd(rows, k);
    const auto group = rows.subspan(k, end - k);
    const int64_t row_start = chunk_row * per_chunk;
    for (size_t col = 0; col < columns; ++col) {
      const size_t linear = static_cast<size_t>(chunk_row) * columns + col;
      const Hdf5ChunkEntry& e = ds_.chunks.at(linear);
      const auto& runs = geo.runs(col);
      if (e.size == 0) {  // never written: the fill value
        for (const auto& r : group) {
          for (const auto& run : runs) Fill(r.dst + run.dst, run.len);
        }
        continue;
      }
      if (ds_.filtered()) {
        DecodedChunkCache::Buffer hold;
        const std::byte* chunk = DecodedChunk(linear, group.front(), scratch, hold);
        for (const auto& r : group) {
          const std::byte* src = chunk + static_cast<size_t>(r.local - row_start) * slab;
          for (const auto& run : runs) std::memcpy(r.dst + run.dst, src + run.src, run.len);
        }
        continue;
      }
      // Unfiltered: read each sample's piece at its offset inside the chunk.
      ReadPiecesAlone(group, linear, col, scratch);
    }
    k = end;
  }
}

void Hdf5DatasetReader::ReadLibrary(std::span<const Hdf5RowTarget> rows,
                                    Hdf5ReadScratch& scratch) const {
  const size_t rank = ds_.dims.size();
  std::vector<hsize_t> start(rank, 0), count(ds_.dims.begin(), ds_.dims.end());
  count[0] = 1;
  Hdf5Lock lock;
  Hdf5Id file_space(H5Dget_space(ds_.library_dataset->get()));
  Hdf5Id memory_space(H5Screate_simple(static_cast<int>(rank), count.data(), nullptr));
  for (const auto& r : rows) {
    start[0] = static_cast<hsize_t>(r.local);
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                            nullptr) < 0 ||
        H5Dread(ds_.library_dataset->get(), ds_.library_memory_type->get(), memory_space.get(),
                file_space.get(), H5P_DEFAULT, r.dst) < 0) {
      const std::string what = fmt::format(
          "{}: dataset {}: cannot read sample {} (row {} of the "
          "file) through libhdf5",
          ds_.path, ds_.dataset, r.global, r.local);
      try {
        throw Error(ErrorCode::kCorruptData, fmt::format("{}: {}", what, Hdf5ErrorMessage()));
      } catch (const Error& e) {
        // A failed read of the file (Hdf5ErrorMessage throws it) keeps its code.
        if (e.code() == ErrorCode::kCorruptData) throw;
        throw Error(e.code(), fmt::format("{}: {}", what, e.what()));
      }
    }
    ++scratch.counters.library_reads;
  }
}

}  // namespace gpufeed
