// Variable-length datasets as h5py writes them (h5py.vlen_dtype(np.int32), h5py.string_dtype()):
// recognised at open, their field `name: int32[*]` (a string: uint8[*], its stored bytes), and
// the dataset itself read as its references (Hdf5VlenType in dataset.h), which the layout,
// the chunk index and the filters hold like any fixed-size element.
//
// Thread-safety: call under the libhdf5 lock (Hdf5Lock).
#pragma once

#include <hdf5.h>

#include <string>

#include "sources/hdf5/format/dtype.h"
#include "sources/hdf5/index/dataset.h"

namespace gpufeed {

// True when the file type `type` is variable-length: a sequence or a variable-length string.
bool IsHdf5VlenType(hid_t type);

// The layout the values of an element of type `type` take: a sequence's base type's, uint8
// for a variable-length string, else `type`'s own (ReadHdf5TypeLayout, which refuses what
// gpufeed does not read, naming `what`).
Hdf5TypeLayout ReadHdf5ElementLayout(hid_t type, const std::string& what);

// Once the type and shape of `ds` are read (its element type `element`): for a variable-length
// dataset, ds.vlen is set (the base's dtype, byte order, the file's address and length widths
// and user block) and ds.field, element_size and the byte order become the reference's. Throws
// Error(kUnsupported) naming `what` for a rank other than 1, a compact layout, external storage,
// a fill value of its own, items of a bitfield or a layout libhdf5 would convert. Does nothing
// for another type.
void AdoptHdf5Vlen(Hdf5Dataset& ds, hid_t element, hid_t file_id, hid_t dcpl,
                   const std::string& what);

}  // namespace gpufeed
