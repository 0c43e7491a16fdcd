// gpufeed's own walk of an HDF5 file's objects, run after the superblock check and before
// libhdf5 walks them (H5Fopen's root group, H5Ovisit2, H5Dopen2's lookup and decoding).
//
// libhdf5 1.10.8 crashes or loops on crafted metadata (messages longer than their block, a
// symbol node with more entries than its node holds, names without a terminator, cycles),
// so gpufeed reads the metadata first and refuses what libhdf5 would misread. From the
// superblock extension and the root group it follows hard links through old-style groups
// (symbol table: a v1 B-tree of symbol nodes, names in a local heap), compact new-style
// groups (link messages) and dense ones (link messages in a fractal heap, found through a v2
// B-tree name index: hdf5_dense_links.h, used by libver="latest" and track_order files for
// groups of more than 8 links), and reads every object header once: every block inside the
// file, every message inside its block, continuations visited once; the messages libhdf5
// decodes on open (dataspace, datatype, fill value, layout, filter pipeline, shared-message
// pointers) bounds-checked field by field (hdf5_message_checks.h); B-tree levels descending,
// every node visited once; heap names terminated inside their heap; free lists without
// cycles; heap blocks and index nodes checksummed. The walk reads each structure once and at
// most a few times the file's size in all, so a crafted file costs no more than a valid one
// of its size.
//
// Dense attribute storage is checked only for its signatures (libhdf5 reads just the B-tree
// header, to count attributes).
//
// Thread-safety: pure function over a File (which is thread-safe).
#pragma once

#include <cstdint>

#include "gpufeed/file.h"
#include "sources/hdf5/format/superblock.h"

namespace gpufeed {

struct Hdf5StructureSummary {
  uint64_t objects = 0;  // object headers checked
};

// Walks and checks the objects of `file` whose superblock `sb` passed CheckHdf5Superblock.
// Throws Error(kCorruptData) naming the file, the structure and its offset when one is
// damaged; kUnsupported for shared messages kept in a shared-message table and for link heaps
// libhdf5 does not write (filtered, or links kept as huge objects).
Hdf5StructureSummary CheckHdf5Structure(const File& file, const Hdf5Superblock& sb);

}  // namespace gpufeed
