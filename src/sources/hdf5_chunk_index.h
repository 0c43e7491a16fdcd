// Reading an HDF5 dataset's chunk index straight from the file.
//
// libhdf5 1.10.8 lacks H5Dchunk_iter, and its H5Dget_chunk_info (by index) and
// H5Dget_chunk_info_by_coord walk the whole index on every call: listing 100,000 chunks that
// way is quadratic (measured: ~1.7 ms per by-coord call at 100,000 chunks, minutes in all).
// h5py's default files (libver "earliest") keep the index in a version-1 B-tree, which this
// walks once through the file seam: milliseconds. Other index kinds (libver "latest": fixed
// and extensible arrays, v2 B-trees) return nullopt and the caller asks libhdf5 by index.
//
// Thread-safety: pure functions over a File (which is thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/file.h"

namespace gpufeed {

// One stored chunk as the index describes it.
struct Hdf5RawChunk {
  std::vector<uint64_t> coords;  // element offset of the chunk's first element, per axis
  uint64_t address = 0;          // absolute file offset of the stored bytes
  uint64_t size = 0;             // stored (filtered) bytes
  uint32_t filter_mask = 0;      // bit i set: filter i of the pipeline was skipped
};

struct Hdf5ObjectLocation {
  uint64_t header_address = 0;  // object header address, relative to the base address
  uint64_t base_address = 0;    // absolute offset of the file's base (the user block size)
  unsigned sizeof_addr = 8;     // from the superblock
  unsigned sizeof_size = 8;
};

// The chunks of the dataset whose object header is at `where`, when its layout message is a
// version-3 chunked layout (a v1 B-tree index); nullopt for any other layout version. `rank`
// is the dataset's rank; `max_chunks` the positions of its chunk grid, which bounds the walk.
// Every node is read once (a node reached twice, a level that does not descend by one, or more
// chunks or nodes than the grid allows is a damaged tree), so a crafted tree costs at most its
// own size. Throws Error(kCorruptData) naming `what` (file and dataset) when the header or the
// tree is damaged or points past the end of the file; kUnsupported for offsets or lengths wider
// than 8 bytes. Never lets std::bad_alloc or std::length_error escape.
std::optional<std::vector<Hdf5RawChunk>> ReadV1BTreeChunkIndex(const File& file,
                                                               const Hdf5ObjectLocation& where,
                                                               int rank, uint64_t max_chunks,
                                                               const std::string& what);

}  // namespace gpufeed
