// Reads the metadata of one HDF5 object (a chunk index, a group's heap and name index) from an
// untrusted file: every block inside the file, every block visited once, the bytes read in all
// bounded by a few times the file's size, and every failure an Error(kCorruptData) that names
// the file and object (`what`) and the structure that was damaged.
//
// Thread-safety: one thread at a time (it keeps the set of visited blocks); the File is
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "gpufeed/file.h"
#include "sources/hdf5/format/metadata_bytes.h"

namespace gpufeed {

struct Hdf5ObjectLocation {
  uint64_t header_address = 0;  // object header address, relative to the base address
  uint64_t base_address = 0;    // absolute offset of the file's base (the user block size)
  unsigned sizeof_addr = 8;     // from the superblock
  unsigned sizeof_size = 8;
  // The superblock's end-of-file address (relative): libhdf5 refuses any read past it, even
  // inside the file, so a structure there is damaged in its eyes too.
  uint64_t end_of_allocation = ~uint64_t{0};
};

class Hdf5MetadataReader {
 public:
  // Throws Error(kUnsupported) for offsets or lengths other than 2, 4 or 8 bytes wide.
  Hdf5MetadataReader(const File& file, const Hdf5ObjectLocation& where, std::string what);

  size_t o() const { return where_.sizeof_addr; }
  size_t l() const { return where_.sizeof_size; }
  const std::string& what() const { return what_; }
  const File& file() const { return file_; }
  const Hdf5ObjectLocation& where() const { return where_; }

  // The "undefined address" (all bits set in the file's address width).
  bool Undefined(uint64_t addr) const;
  // The absolute file offset of relative address `addr`, checked to be inside the file.
  uint64_t Absolute(uint64_t addr, std::string_view structure) const;
  // `n` bytes of `structure` at relative address `addr`.
  std::vector<uint8_t> Read(uint64_t addr, uint64_t n, std::string_view structure);
  // Records a visit of the block at `addr`; a second visit is a damaged structure (a cycle or
  // two parents sharing one child).
  void VisitOnce(uint64_t addr, std::string_view structure);
  // Reads a version-0 block of `n` bytes that starts with `signature` and ends with its
  // checksum (fixed and extensible arrays, v2 B-tree nodes, fractal heap blocks).
  std::vector<uint8_t> ReadChecked(uint64_t addr, uint64_t n, const char* signature,
                                   std::string_view structure);

  // Throws Error(kCorruptData) "<what>: <message>".
  [[noreturn]] void Damaged(const std::string& message) const;

 private:
  const File& file_;
  const Hdf5ObjectLocation where_;
  const std::string what_;
  uint64_t read_budget_;
  std::unordered_set<uint64_t> visited_;
};

}  // namespace gpufeed
