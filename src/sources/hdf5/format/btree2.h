// A walk over an HDF5 version-2 B-tree (the chunk index of libver="latest" datasets with more
// than one unlimited axis, and the name index of groups that store their links densely),
// bounded and checked: every node's signature and checksum verified, levels descending by one,
// every node visited once, node record counts within what the node size allows, and no more
// records than the header counts or the caller allows.
//
// Thread-safety: one thread at a time per Hdf5MetadataReader.
#pragma once

#include <cstdint>
#include <functional>

#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/format/metadata_reader.h"

namespace gpufeed {

struct Hdf5BTree2Header {
  uint64_t address = 0;
  unsigned type = 0;  // 5: link names, 10: chunks, 11: filtered chunks, ...
  uint32_t node_size = 0;
  uint32_t record_size = 0;
  unsigned depth = 0;
  uint64_t root = 0;
  uint64_t root_records = 0;
  uint64_t total_records = 0;
};

// Reads and checks the header at relative address `address`; its record type must be `type`.
Hdf5BTree2Header ReadHdf5BTree2Header(Hdf5MetadataReader& r, uint64_t address, unsigned type);

// Calls `record` with each record (record_size bytes) in key order. Throws Error(kCorruptData)
// through `r` when the tree is damaged or holds more than `max_records` records.
void WalkHdf5BTree2(Hdf5MetadataReader& r, const Hdf5BTree2Header& header, uint64_t max_records,
                    const std::function<void(const Bytes&)>& record);

}  // namespace gpufeed
