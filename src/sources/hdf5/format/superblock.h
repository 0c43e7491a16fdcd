// gpufeed's own check of an HDF5 file's superblock and root object header, run before libhdf5
// opens the file.
//
// libhdf5 1.10.8 trusts much of what it reads (crafted files crash it), so gpufeed reads the
// fixed-size start of the file itself and refuses what libhdf5 would misread: a signature
// that is missing, a superblock version it does not know, offsets or lengths wider than
// 8 bytes, B-tree K values of 0, and addresses (base, root object header, superblock
// extension, driver info, free space) that lie past the end of the file. Only a file that
// passes is handed to H5Fopen.
//
// Thread-safety: pure function over a File (which is thread-safe).
#pragma once

#include <cstdint>

#include "gpufeed/file.h"

namespace gpufeed {

struct Hdf5Superblock {
  unsigned version = 0;
  uint64_t signature_offset = 0;  // where the signature is (0, or the user block's size)
  uint64_t base_address = 0;      // absolute offset that file addresses are relative to
  unsigned sizeof_addr = 8;
  unsigned sizeof_size = 8;
  uint64_t root_header_address = 0;  // relative to the base address
  uint64_t end_of_file = ~uint64_t{0};  // the end-of-file address (relative): libhdf5's EOA
  // Superblock extension object header (version 2 and 3), relative; ~0 when there is none.
  uint64_t extension_address = ~uint64_t{0};
  // Symbol-table B-tree K values (versions 0 and 1 store them; later ones default to 4 and 16
  // unless the extension says otherwise).
  unsigned group_leaf_k = 4;
  unsigned group_internal_k = 16;
};

// Reads and checks the superblock of `file` and the prefix of its root group's object header.
// Throws Error(kCorruptData) naming the file and the field when it is damaged ("not an HDF5
// file" when there is no signature), kUnsupported for versions or widths gpufeed does not read.
Hdf5Superblock CheckHdf5Superblock(const File& file);

}  // namespace gpufeed
