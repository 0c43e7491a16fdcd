// The chunk indexes of version-4 data layouts (libver="latest"), read by gpufeed itself:
// single chunk, implicit (every chunk allocated in one array), fixed array, extensible array
// and version-2 B-tree. Each is bounded by the chunk grid (no more entries than its positions,
// no position outside the dataset's extent), every block's signature and checksum verified,
// every block visited once, every size through checked arithmetic.
//
// Thread-safety: one thread at a time per Hdf5MetadataReader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/format/metadata_reader.h"
#include "sources/hdf5/index/chunk_index.h"

namespace gpufeed {

// The chunks the version-4 chunked layout message `layout` indexes.
Hdf5ChunkList ReadV4ChunkIndex(Hdf5MetadataReader& r, const Bytes& layout,
                               const Hdf5ChunkGrid& grid);

// Collects chunks found at linear positions of an index over the maximum shape, in the axis
// order `order` (slowest first; the extensible array moves its unlimited axis first).
class Hdf5ChunkCollector {
 public:
  Hdf5ChunkCollector(Hdf5MetadataReader& r, const Hdf5ChunkGrid& grid, std::vector<size_t> order);

  // The array element at `pos` of `elements`: an address, and for filtered chunks a size of
  // `element_size` - o - 4 bytes and a filter mask. An undefined address is an unwritten chunk.
  void AddElement(uint64_t index, const Bytes& elements, size_t pos, size_t element_size);
  // A chunk at the scaled (chunk-unit) coordinates `scaled`.
  void Add(const std::vector<uint64_t>& scaled, uint64_t address, uint64_t size, uint32_t mask);

  std::vector<Hdf5RawChunk> chunks;

 private:
  Hdf5MetadataReader& r_;
  const Hdf5ChunkGrid& grid_;
  const std::vector<size_t> order_;
  std::vector<uint64_t> scaled_;
};

// The extensible array whose header is at `address` (hdf5_chunk_earray.cc).
void ReadHdf5ExtensibleArray(Hdf5MetadataReader& r, uint64_t address, const Hdf5ChunkGrid& grid,
                             Hdf5ChunkCollector& out);

}  // namespace gpufeed
