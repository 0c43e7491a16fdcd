// The gpufeed dtype of an HDF5 file datatype: bool (h5py's int8 enum), integers, float16,
// bfloat16, float32, float64; anything else is refused naming what it is.
//
// Thread-safety: call under the libhdf5 lock (Hdf5Lock).
#pragma once

#include <hdf5.h>

#include <string>

#include "gpufeed/dtype.h"

namespace gpufeed {

// Maps the file type to a gpufeed dtype, or throws Error(kUnsupported) naming `what` and the
// type's class ("variable-length string", "compound", a 3-byte integer...).
DType MapHdf5Type(hid_t type, const std::string& what);

}  // namespace gpufeed
