// The chunk table of a chunked HDF5 dataset: its chunk shape and grid checked against the file
// (no product overflows, no grid past 2^36 positions, no chunk of 4 GiB or more),
// then every stored chunk's offset, size and filter mask placed at its row-major grid position,
// each inside the file, none listed twice.
//
// Thread-safety: call under the libhdf5 lock (Hdf5Lock), on a dataset being opened.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>

#include "gpufeed/file.h"
#include "sources/hdf5/index/dataset.h"

namespace gpufeed {

// Throws Error(kCorruptData) naming the dataset and `part` when [address, address + size) is
// not inside `file`.
void CheckHdf5DataRange(const Hdf5Dataset& ds, const File& file, uint64_t address, uint64_t size,
                        const std::string& part);

// Fills the chunked layout of `ds` (dims, filters and element size already read): chunk shape
// and grid, then either the chunk table (storage kChunked) or, for a filter gpufeed does not
// decode, storage kLibrary with the stored size. `dset`, `space` and `dcpl` are the open
// dataset, its dataspace and its creation property list in the file `file_id`.
void OpenHdf5ChunkedLayout(Hdf5Dataset& ds, hid_t file_id, hid_t dset, hid_t space, hid_t dcpl,
                           const File& file);

}  // namespace gpufeed
