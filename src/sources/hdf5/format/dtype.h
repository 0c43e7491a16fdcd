// The gpufeed dtype of an HDF5 file datatype (bool as h5py's int8 enum or PyTables' 8-bit
// bitfield, integers, wider bitfields as unsigned integers, float16, bfloat16, float32,
// float64) and whether gpufeed may read the type's bytes itself.
//
// gpufeed reads elements itself only when their bits are exactly the standard layout of their
// dtype (two's complement or unsigned integers using every bit, IEEE floats with the standard
// fields and exponent bias), little- or big-endian. Any other layout (an N-bit integer, a bit
// offset, VAX byte order, another exponent bias or field position) is read through libhdf5
// into the dtype's memory type (Hdf5MemoryType), which converts it (sign extension included)
// as it does for h5py.
//
// Thread-safety: call under the libhdf5 lock (Hdf5Lock).
#pragma once

#include <hdf5.h>

#include <string>

#include "gpufeed/dtype.h"
#include "sources/hdf5/format/library.h"

namespace gpufeed {

struct Hdf5TypeLayout {
  DType dtype = DType::kUInt8;
  bool big_endian = false;  // the standard layout with its bytes reversed
  // Empty when the bytes are the dtype's standard layout (after the byte swap); else what
  // differs ("3-bit precision at bit offset 0"), and libhdf5 must convert them.
  std::string conversion;
  // A bitfield (libhdf5 converts it only into the native bitfield of its size). Read as bool
  // (8 bits), each byte must be 0 or 1: another value is refused as it is read, naming the
  // sample, rather than handed to torch as a bool it cannot hold.
  bool bitfield = false;
};

// The dtype and layout of the file type `type`, or Error(kUnsupported) naming `what` (file and
// dataset) and the feature: its class ("variable-length string", "compound"), its size (a
// 3-byte integer), a float layout of no gpufeed dtype, a byte order other than little-endian,
// big-endian and VAX.
Hdf5TypeLayout ReadHdf5TypeLayout(hid_t type, const std::string& what);

// Shorthand for ReadHdf5TypeLayout(type, what).dtype.
DType MapHdf5Type(hid_t type, const std::string& what);

// The memory type libhdf5 converts into for `dtype`: H5T_NATIVE_* (bool: uint8), and for
// float16 and bfloat16, which libhdf5 has no native type for, their IEEE little-endian layouts.
// A `bitfield` file type converts into the native bitfield of the dtype's size.
Hdf5Id Hdf5MemoryType(DType dtype, bool bitfield = false);

// Throws Error(kUnsupported) naming `what` unless `memory_type` is Hdf5MemoryType(dtype): a
// read into any other type (a copy of the file type keeps its precision) returns other values
// than h5py does.
void CheckHdf5MemoryType(hid_t memory_type, DType dtype, const std::string& what,
                         bool bitfield = false);

}  // namespace gpufeed
