// A global heap collection ("GCOL"): where HDF5 keeps the items of variable-length data (h5py's
// vlen sequences and strings). A dataset element is a reference to one object of a collection;
// the collection holds a header, then objects end to end, each an index, a reference count and
// a size, its bytes padded to 8, and last the free space (object 0).
//
// Every byte is untrusted: the parser walks the objects within the collection's bytes only,
// refuses an object that runs past them, an index listed twice, a collection whose size
// disagrees with its bytes, and a walk that makes no progress (libhdf5 1.10 loops forever on a
// free-space object of size 0).
//
// Thread-safety: pure functions; a parsed Hdf5GlobalHeap is immutable, share it freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gpufeed {

// One object of a collection: its bytes at [offset, offset + size) of the collection.
struct Hdf5HeapObject {
  uint16_t index = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct Hdf5GlobalHeap {
  std::vector<uint8_t> bytes;           // the whole collection, header included
  std::vector<Hdf5HeapObject> objects;  // by index, object 0 (free space) left out
  // The object numbered `index`, or nullopt when the collection has none.
  std::optional<Hdf5HeapObject> Find(uint64_t index) const;
};

// The collection header's size: signature, version, 3 reserved bytes, the collection's size.
inline size_t Hdf5GlobalHeapHeaderBytes(unsigned sizeof_size) { return 8 + sizeof_size; }

// The collection's size from its first Hdf5GlobalHeapHeaderBytes bytes (`header`). Throws
// Error(kCorruptData) naming `where` for a missing "GCOL" signature, a version other than 1 or a
// size below the header's.
uint64_t ParseHdf5GlobalHeapSize(std::span<const uint8_t> header, unsigned sizeof_size,
                                 const std::string& where);

// Parses a whole collection (`bytes`: its header first, exactly the size the header gives).
// Throws Error(kCorruptData) naming `where` and what is wrong.
Hdf5GlobalHeap ParseHdf5GlobalHeap(std::vector<uint8_t> bytes, unsigned sizeof_size,
                                   const std::string& where);

}  // namespace gpufeed
