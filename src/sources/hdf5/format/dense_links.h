// The links of a group that stores them densely (libver="latest" and track_order files with
// more than 8 links in a group): link messages kept in a fractal heap, found through a
// version-2 B-tree indexed by the hash of each name (and, with track_order, a second one by
// creation order). Read by gpufeed before libhdf5 walks them (libhdf5 1.10.8 crashes on crafted
// heaps): every heap block's signature and checksum verified, every block visited once, every
// heap ID resolved inside its block, every name index record's hash equal to its link's name.
//
// Thread-safety: one thread at a time per Hdf5MetadataReader.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/format/metadata_reader.h"

namespace gpufeed {

struct Hdf5DenseLinks {
  uint64_t heap = 0;         // fractal heap header
  uint64_t name_index = 0;   // v2 B-tree of link name hashes
  uint64_t order_index = 0;  // v2 B-tree of creation order; undefined when not indexed
};

// Calls `link` with each link message (once per link, in name-hash order); `link` returns the
// link's name, whose hash must equal the name index record's. Throws Error(kCorruptData)
// through `r` when a structure is damaged; kUnsupported for filtered heaps and for links kept
// as huge heap objects (libhdf5 writes neither for links).
void ReadHdf5DenseLinks(Hdf5MetadataReader& r, const Hdf5DenseLinks& where,
                        const std::function<std::string(const Bytes&)>& link);

}  // namespace gpufeed
