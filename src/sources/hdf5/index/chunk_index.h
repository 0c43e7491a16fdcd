// Reading an HDF5 dataset's chunk index straight from the file.
//
// libhdf5 1.10.8 lacks H5Dchunk_iter, and its H5Dget_chunk_info (by index) and
// H5Dget_chunk_info_by_coord walk the whole index on every call: listing 100,000 chunks that
// way is quadratic (measured: ~1.7 ms per by-coord call at 100,000 chunks, minutes in all), and
// libhdf5 crashes on crafted indexes. gpufeed reads every index kind itself, once, through the
// file seam: the version-1 B-tree of h5py's default files (layout version 3) and of HDF5 1.6
// and older (layout versions 1 and 2), and the indexes of libver="latest" files (layout
// version 4: single chunk, implicit, fixed array, extensible array, version-2 B-tree;
// chunk_index_v4.h).
//
// Thread-safety: pure functions over a File (which is thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/file.h"
#include "sources/hdf5/format/metadata_reader.h"

namespace gpufeed {

// One stored chunk as the index describes it.
struct Hdf5RawChunk {
  std::vector<uint64_t> coords;  // element offset of the chunk's first element, per axis
  uint64_t address = 0;          // absolute file offset of the stored bytes
  uint64_t size = 0;             // stored (filtered) bytes
  uint32_t filter_mask = 0;      // bit i set: filter i of the pipeline was skipped
};

inline constexpr uint64_t kHdf5Unlimited = ~uint64_t{0};

// The dataset's chunk grid, checked by the caller (no product overflows).
struct Hdf5ChunkGrid {
  std::vector<uint64_t> chunk_dims;  // elements per chunk, per axis
  std::vector<uint64_t> grid;        // chunks per axis over the current shape
  std::vector<uint64_t> max_dims;    // the maximum shape; kHdf5Unlimited for unlimited axes
  uint64_t grid_total = 0;           // product of `grid`
  uint64_t chunk_bytes = 0;          // decoded bytes of one full chunk
  bool filtered = false;             // the dataset has a filter pipeline
};

struct Hdf5ChunkList {
  std::vector<Hdf5RawChunk> chunks;
  std::string method;  // the index kind, for inspect ("fixed array, read directly")
  // False where libhdf5 1.10.8's chunk-info calls misreport the chunks (an extensible array
  // whose unlimited axis is not the first: it lists swizzled coordinates and cannot find
  // chunks by coordinates, though its reads are right), so they cannot cross-check them.
  bool library_chunk_info_reliable = true;
  // The layout's "do not filter partial bound chunks" flag: a chunk reaching past the current
  // shape is stored unfiltered, though its filter mask says 0.
  bool partial_edges_unfiltered = false;
};

// The chunks of the dataset whose object header is at `where`; nullopt when its layout message
// is not a chunked one. Every node or block is read once (a block reached twice, a level that does
// not descend by one, or more chunks than the grid allows is a damaged index), so a crafted index
// costs at most its own size. Throws Error(kCorruptData) naming `what` (file and dataset) and
// the structure when the header or the index is damaged or points past the end of the file;
// kUnsupported for offsets or lengths wider than 8 bytes. Never lets std::bad_alloc or
// std::length_error escape.
std::optional<Hdf5ChunkList> ReadHdf5ChunkIndex(const File& file, const Hdf5ObjectLocation& where,
                                                const Hdf5ChunkGrid& grid, const std::string& what);

}  // namespace gpufeed
