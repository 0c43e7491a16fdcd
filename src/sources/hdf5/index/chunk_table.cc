#include "sources/hdf5/index/chunk_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "core/checked_math.h"
#include "core/log.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/chunk_index.h"
#include "sources/hdf5/index/geometry.h"

namespace gpufeed {
namespace {

// The `libhdf5` by-index listing is quadratic in 1.10.8; below this many chunks it is still
// only milliseconds (it lists only indexes gpufeed's own walk does not read).
constexpr uint64_t kSlowIndexWarning = 20000;
// A dense chunk table holds one entry (24 bytes) per grid position, written or not. A file
// indexes at most one stored chunk per few dozen bytes, so a grid far larger than the file
// keeps only its stored chunks (a sparse dataset, most chunks never written); a grid past
// kMaxSparseGrid is a damaged shape (chunk positions are 36-bit in the decoded-chunk cache's
// keys), refused before anything is allocated.
constexpr uint64_t kMinChunkTableCap = uint64_t{1} << 20;
constexpr uint64_t kFileBytesPerGridEntry = 32;
constexpr uint64_t kMaxSparseGrid = uint64_t{1} << 36;
// HDF5 caps a chunk below 4 GiB (its sizes are 32-bit in the index).
constexpr uint64_t kMaxChunkBytes = 0xffffffffu;
// Copy runs of one sample over all its chunks: a chunk shape that slices a sample into more
// pieces than this is refused rather than planned (each run costs 24 bytes).
constexpr uint64_t kMaxCopyRuns = uint64_t{1} << 20;
// zlib inflates at most 1032 times its input; a stored chunk claiming more decodes to garbage
// only after allocating the full chunk, so it is refused at open.
constexpr uint64_t kMaxInflateRatio = 1032;

// Grids up to this many positions a file of this size could index get a table entry per
// position; larger ones keep only their stored chunks.
uint64_t DenseTableCap(const File& file) {
  return std::max(kMinChunkTableCap, file.Size() / kFileBytesPerGridEntry);
}

std::string ChunkName(const std::vector<uint64_t>& coords) {
  return fmt::format("chunk at [{}]", fmt::join(coords, ","));
}

std::vector<Hdf5RawChunk> ListChunksByIndex(hid_t dset, hid_t space, uint64_t n, int rank,
                                            const std::string& what) {
  std::vector<Hdf5RawChunk> out(n);
  std::vector<hsize_t> offset(rank);
  for (uint64_t i = 0; i < n; ++i) {
    // libhdf5 may walk the index for every chunk: a big one takes minutes, so Ctrl-C counts.
    if (i % 256 == 0) ThrowIfCancelled(what + ": listing the chunks through libhdf5");
    unsigned mask = 0;
    haddr_t addr = 0;
    hsize_t size = 0;
    if (H5Dget_chunk_info(dset, space, i, offset.data(), &mask, &addr, &size) < 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: cannot read chunk {} of the chunk index: {}", what, i,
                              Hdf5ErrorMessage()));
    }
    out[i].coords.assign(offset.begin(), offset.end());
    out[i].address = addr;
    out[i].size = size;
    out[i].filter_mask = mask;
  }
  return out;
}

// The chunk index read by gpufeed's own walkers (every index kind of layout versions 1 to 4):
// bounded by the grid, every node visited once, checked against the file size. Runs before any
// libhdf5 call that walks the index, so libhdf5 only walks an index that passed these checks.
std::optional<Hdf5ChunkList> ReadOwnChunkIndex(const Hdf5Dataset& ds, hid_t file_id, hid_t dset,
                                               hid_t space, const File& file, uint64_t grid_total,
                                               hsize_t& userblock) {
  const std::string what = fmt::format("{}: dataset {}", ds.path, ds.dataset);
  H5O_info_t info;
  Hdf5Id fcpl(H5Fget_create_plist(file_id));
  size_t sizeof_addr = 8, sizeof_size = 8;
  userblock = 0;
  const size_t rank = ds.dims.size();
  std::vector<hsize_t> max_dims(rank);
  if (H5Oget_info2(dset, &info, H5O_INFO_BASIC) < 0 ||
      H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
      H5Pget_userblock(fcpl.get(), &userblock) < 0 ||
      H5Sget_simple_extent_dims(space, nullptr, max_dims.data()) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot read the object header: {}", what, Hdf5ErrorMessage()));
  }
  Hdf5ObjectLocation where;
  where.header_address = info.addr;
  where.base_address = userblock;
  where.sizeof_addr = static_cast<unsigned>(sizeof_addr);
  where.sizeof_size = static_cast<unsigned>(sizeof_size);
  Hdf5ChunkGrid grid;
  grid.chunk_dims.assign(ds.chunk_dims.begin(), ds.chunk_dims.end());
  grid.grid.assign(ds.chunk_grid.begin(), ds.chunk_grid.end());
  for (hsize_t m : max_dims) grid.max_dims.push_back(m == H5S_UNLIMITED ? kHdf5Unlimited : m);
  grid.grid_total = grid_total;
  grid.chunk_bytes = ds.ChunkBytes();  // below 4 GiB (CheckChunkShape)
  grid.filtered = ds.filtered();
  return ReadHdf5ChunkIndex(file, where, grid, what);
}

// What libhdf5 says about the chunk at `c`'s coordinates, against what gpufeed read.
void CrossCheckChunk(const Hdf5RawChunk& c, hid_t dset, hsize_t userblock,
                     const std::string& what) {
  const std::vector<hsize_t> coords(c.coords.begin(), c.coords.end());
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(dset, coords.data(), &mask, &addr, &size) < 0) {
    throw Error(ErrorCode::kCorruptData, fmt::format("{}: libhdf5 cannot find the {}: {}", what,
                                                     ChunkName(c.coords), Hdf5ErrorMessage()));
  }
  if (addr == HADDR_UNDEF || c.address != addr + userblock || c.size != size ||
      c.filter_mask != mask) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the chunk index disagrees with libhdf5 about its {}", what,
                            ChunkName(c.coords)));
  }
}

// The cross-check of gpufeed's own reading with libhdf5's, so a misread index cannot pass
// silently: the first and last chunks listed, looked up by coordinates (cheap in every index
// kind); and, below kSlowIndexWarning chunks, libhdf5's count (a walk of the whole index:
// 0.4 s for a v2 B-tree of 100,000 chunks, which the open of such a file cannot afford).
void CrossCheckWithLibrary(const Hdf5ChunkList& list, hid_t dset, hid_t space, hsize_t userblock,
                           const std::string& what) {
  const std::vector<Hdf5RawChunk>& raw = list.chunks;
  if (!raw.empty() && list.library_chunk_info_reliable) {
    CrossCheckChunk(raw.front(), dset, userblock, what);
    CrossCheckChunk(raw.back(), dset, userblock, what);
  }
  if (raw.size() > kSlowIndexWarning) return;
  hsize_t n = 0;
  if (H5Dget_num_chunks(dset, space, &n) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot count chunks: {}", what, Hdf5ErrorMessage()));
  }
  if (raw.size() != n) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the chunk index lists {} chunks where libhdf5 counts {}", what,
                            raw.size(), n));
  }
}

// Every chunk by libhdf5's by-index listing (quadratic in 1.10.8: the index kinds gpufeed does
// not read itself).
std::vector<Hdf5RawChunk> ListChunksThroughLibrary(Hdf5Dataset& ds, hid_t dset, hid_t space,
                                                   hsize_t userblock, uint64_t grid_total,
                                                   const std::string& what) {
  hsize_t n = 0;
  if (H5Dget_num_chunks(dset, space, &n) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot count chunks: {}", what, Hdf5ErrorMessage()));
  }
  if (n > grid_total) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the chunk index counts {} chunks, more than the {} positions of "
                            "the chunk grid",
                            what, n, grid_total));
  }
  ds.index_method = "libhdf5 H5Dget_chunk_info";
  if (n > kSlowIndexWarning) {
    Log(LogLevel::kWarning, fmt::format("{}: listing {} chunks through libhdf5 (not a v1 "
                                        "B-tree index); this open may take minutes",
                                        what, n));
  }
  std::vector<Hdf5RawChunk> raw =
      ListChunksByIndex(dset, space, n, static_cast<int>(ds.dims.size()), what);
  for (auto& c : raw) c.address = AddOrThrow(c.address, userblock, what + ": a chunk address");
  return raw;
}

// The row-major grid position of `c`, checked to lie on the grid.
uint64_t GridPosition(const Hdf5Dataset& ds, const Hdf5RawChunk& c, const std::string& what) {
  const size_t rank = ds.dims.size();
  if (c.coords.size() != rank) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the chunk index holds a {} of rank {} in a rank-{} dataset", what,
                            ChunkName(c.coords), c.coords.size(), rank));
  }
  uint64_t linear = 0;
  for (size_t d = 0; d < rank; ++d) {
    const uint64_t cd = static_cast<uint64_t>(ds.chunk_dims[d]);
    if (c.coords[d] % cd != 0 || c.coords[d] / cd >= static_cast<uint64_t>(ds.chunk_grid[d])) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunk index holds a {} outside the dataset's chunk grid",
                              what, ChunkName(c.coords)));
    }
    // Below the grid's total, which was checked not to overflow.
    linear = linear * static_cast<uint64_t>(ds.chunk_grid[d]) + c.coords[d] / cd;
  }
  return linear;
}

// One stored chunk's size against what its chunk decodes to.
void CheckStoredSize(const Hdf5Dataset& ds, const Hdf5RawChunk& c, uint64_t full_bytes,
                     const std::string& what) {
  if (!ds.filtered() && c.size != full_bytes) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: unfiltered {} stores {} bytes, expected {}", what,
                            ChunkName(c.coords), c.size, full_bytes));
  }
  if (c.size == 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: {} is stored with 0 bytes", what, ChunkName(c.coords)));
  }
  if (full_bytes / kMaxInflateRatio > c.size) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: {} stores {} bytes, which no filter here decodes to the {} "
                            "bytes of a chunk",
                            what, ChunkName(c.coords), c.size, full_bytes));
  }
}

// Whether the chunk at `coords` reaches past the dataset's current shape (as libhdf5 decides
// which chunks its "do not filter partial bound chunks" flag leaves unfiltered).
bool PartialEdgeChunk(const Hdf5Dataset& ds, const std::vector<uint64_t>& coords) {
  for (size_t d = 0; d < coords.size() && d < ds.dims.size(); ++d) {
    // coords < shape + chunk, each below 2^63: no overflow.
    if (coords[d] + static_cast<uint64_t>(ds.chunk_dims[d]) > static_cast<uint64_t>(ds.dims[d])) {
      return true;
    }
  }
  return false;
}

// Places every listed chunk at its grid position in ds.chunks: a dense table for a grid the
// file could index, the stored chunks only for a larger one.
void PlaceChunks(Hdf5Dataset& ds, const File& file, const std::vector<Hdf5RawChunk>& raw,
                 uint64_t grid_total, const std::string& what, bool partial_edges_unfiltered) {
  const uint64_t full_bytes = ds.ChunkBytes();
  uint64_t stored = 0;
  std::vector<std::pair<uint64_t, size_t>> order;  // (grid position, index in raw)
  order.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const Hdf5RawChunk& c = raw[i];
    order.emplace_back(GridPosition(ds, c, what), i);
    CheckHdf5DataRange(ds, file, c.address, c.size, ChunkName(c.coords));
    CheckStoredSize(ds, c, full_bytes, what);
    stored += c.size;  // each below the file size, at most grid_total of them: no overflow
  }
  std::sort(order.begin(), order.end());
  std::vector<std::pair<uint64_t, Hdf5ChunkEntry>> entries;
  entries.reserve(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const Hdf5RawChunk& c = raw[order[k].second];
    if (k > 0 && order[k].first == order[k - 1].first) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunk index lists the {} twice", what, ChunkName(c.coords)));
    }
    // Every filter skipped for an unfiltered edge chunk.
    const uint32_t mask =
        partial_edges_unfiltered && PartialEdgeChunk(ds, c.coords) ? ~uint32_t{0} : c.filter_mask;
    entries.emplace_back(order[k].first, Hdf5ChunkEntry{c.address, c.size, mask});
  }
  ds.chunks.Assign(grid_total, std::move(entries), grid_total <= DenseTableCap(file));
  ds.storage_bytes = stored;
}

void BuildChunkIndex(Hdf5Dataset& ds, hid_t dset, hid_t space, const File& file,
                     std::optional<Hdf5ChunkList> own, hsize_t userblock, uint64_t grid_total) {
  const std::string what = fmt::format("{}: dataset {}", ds.path, ds.dataset);
  const auto start = std::chrono::steady_clock::now();
  if (own) {
    // Every check of gpufeed's own (grid, duplicates, sizes, file bounds) before libhdf5
    // walks the index to cross-check it.
    ds.index_method = std::move(own->method);
    PlaceChunks(ds, file, own->chunks, grid_total, what, own->partial_edges_unfiltered);
    CrossCheckWithLibrary(*own, dset, space, userblock, what);
  } else {
    PlaceChunks(ds, file, ListChunksThroughLibrary(ds, dset, space, userblock, grid_total, what),
                grid_total, what, false);
  }
  ds.index_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Checks the chunk shape and computes the grid; returns the number of grid positions.
uint64_t CheckChunkShape(Hdf5Dataset& ds, const std::string& what) {
  const uint64_t chunk_elements = [&] {
    for (int64_t c : ds.chunk_dims) {
      if (c < 1) {
        throw Error(ErrorCode::kCorruptData, fmt::format("{}: chunk shape [{}] has an empty axis",
                                                         what, fmt::join(ds.chunk_dims, ", ")));
      }
    }
    std::vector<uint64_t> c(ds.chunk_dims.begin(), ds.chunk_dims.end());
    return CheckedProduct(c).value_or(UINT64_MAX);
  }();
  const auto chunk_bytes = CheckedMul(chunk_elements, ds.element_size);
  if (!chunk_bytes || *chunk_bytes > kMaxChunkBytes) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: chunk shape [{}] of {}-byte elements is 4 GiB or more (HDF5 "
                            "chunks are smaller): damaged chunk shape?",
                            what, fmt::join(ds.chunk_dims, ", "), ds.element_size));
  }
  std::vector<uint64_t> grid;
  for (size_t d = 0; d < ds.dims.size(); ++d) {
    const auto n = static_cast<uint64_t>(ds.dims[d]);
    const auto c = static_cast<uint64_t>(ds.chunk_dims[d]);
    grid.push_back(n / c + (n % c != 0 ? 1 : 0));
  }
  ds.chunk_grid.assign(grid.begin(), grid.end());
  const auto total = CheckedProduct(grid);
  if (!total || *total > kMaxSparseGrid) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: shape [{}] in chunks of [{}] makes a grid of {} chunks, more than "
                            "{}: damaged shape or chunk shape?",
                            what, fmt::join(ds.dims, ", "), fmt::join(ds.chunk_dims, ", "),
                            total ? fmt::format("{}", *total)
                                  : fmt::format("[{}] (over 2^64)", fmt::join(grid, " x ")),
                            kMaxSparseGrid));
  }
  const auto runs = Hdf5ChunkGeometry::CountRuns(ds.dims, ds.chunk_dims);
  if (!runs || *runs > kMaxCopyRuns) {
    throw Error(
        ErrorCode::kUnsupported,
        fmt::format("{}: chunks of [{}] cut each sample of [{}] into {} pieces (at most "
                    "{} are read): rewrite the file with larger chunks",
                    what, fmt::join(ds.chunk_dims, ", "), fmt::join(ds.dims, ", "),
                    runs ? fmt::format("{}", *runs) : std::string("over 2^64"), kMaxCopyRuns));
  }
  return *total;
}

}  // namespace

void Hdf5ChunkTable::Assign(uint64_t positions,
                            std::vector<std::pair<uint64_t, Hdf5ChunkEntry>> stored, bool dense) {
  positions_ = positions;
  stored_ = std::move(stored);
  dense_.clear();
  if (!dense) return;
  dense_.assign(positions, Hdf5ChunkEntry{});
  for (const auto& [linear, entry] : stored_) dense_[linear] = entry;
}

const Hdf5ChunkEntry& Hdf5ChunkTable::at(uint64_t linear) const {
  if (!dense_.empty()) return dense_[linear];
  static const Hdf5ChunkEntry kNeverWritten;
  const auto it = std::lower_bound(stored_.begin(), stored_.end(), linear,
                                   [](const auto& e, uint64_t l) { return e.first < l; });
  return it != stored_.end() && it->first == linear ? it->second : kNeverWritten;
}

void CheckHdf5DataRange(const Hdf5Dataset& ds, const File& file, uint64_t address, uint64_t size,
                        const std::string& part) {
  if (address > file.Size() || size > file.Size() - address) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: dataset {}: {} at offset {} ({} bytes) lies past the end of the "
                            "file ({} bytes): truncated file?",
                            ds.path, ds.dataset, part, address, size, file.Size()));
  }
}

void OpenHdf5ChunkedLayout(Hdf5Dataset& ds, hid_t file_id, hid_t dset, hid_t space, hid_t dcpl,
                           const File& file) {
  const std::string what = fmt::format("{}: dataset {}", ds.path, ds.dataset);
  const int rank = static_cast<int>(ds.dims.size());
  ds.layout_name = "chunked";
  std::vector<hsize_t> cdims(rank);
  if (H5Pget_chunk(dcpl, rank, cdims.data()) != rank) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot read the chunk shape: {}", what, Hdf5ErrorMessage()));
  }
  // v3 and v4 layouts store chunk extents in at most 32 bits.
  for (int d = 0; d < rank; ++d) {
    ds.chunk_dims.push_back(static_cast<int64_t>(std::min<hsize_t>(cdims[d], UINT32_MAX)));
  }
  const uint64_t grid_total = CheckChunkShape(ds, what);
  // gpufeed's own walk of the index comes first: libhdf5's own walks (counting chunks,
  // storage size) follow only once the tree passed it.
  hsize_t userblock = 0;
  auto own = ReadOwnChunkIndex(ds, file_id, dset, space, file, grid_total, userblock);
  for (const auto& f : ds.filters) {
    if (!IsDecodableHdf5Filter(f.id)) {
      ds.storage = Hdf5Storage::kLibrary;
      ds.library_reason = fmt::format("filter {}", f.name.empty() ? std::to_string(f.id) : f.name);
      break;
    }
  }
  if (ds.storage != Hdf5Storage::kLibrary) {
    ds.storage = Hdf5Storage::kChunked;
    BuildChunkIndex(ds, dset, space, file, std::move(own), userblock, grid_total);
    return;
  }
  // libhdf5 decodes these: it must have the filters (a plugin), or the open says which
  // package provides them.
  RequireHdf5LibraryFilters(ds.filters, what);
  if (own) {
    // Kept for inspect's counts only (the reads go through libhdf5).
    uint64_t stored = 0;
    std::vector<std::pair<uint64_t, Hdf5ChunkEntry>> entries;
    for (const auto& c : own->chunks) {
      CheckHdf5DataRange(ds, file, c.address, c.size, ChunkName(c.coords));
      stored += c.size;  // each below the file size, at most grid_total of them
      entries.emplace_back(GridPosition(ds, c, what),
                           Hdf5ChunkEntry{c.address, c.size, c.filter_mask});
    }
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    ds.chunks.Assign(grid_total, std::move(entries), false);
    ds.storage_bytes = stored;
  } else {
    ds.storage_bytes = H5Dget_storage_size(dset);
  }
}

}  // namespace gpufeed
