// Field-by-field checks of the object header messages libhdf5 decodes when it opens a dataset
// (dataspace, datatype, fill value, data layout, filter pipeline), run by gpufeed's structure
// walk (hdf5_structure.h) before libhdf5 reads them: every length and count inside its message,
// ranks, nesting and filter counts bounded.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>

#include "sources/hdf5/metadata_bytes.h"

namespace gpufeed {

// What the checks need from the file: its path for errors and its field widths.
struct Hdf5MessageContext {
  const std::string& path;
  size_t sizeof_addr;
  size_t sizeof_size;
  // Throws Error(kCorruptData) "<path>: damaged HDF5 metadata: <what>".
  [[noreturn]] void Damaged(const std::string& what) const;
};

void CheckDataspaceMessage(const Hdf5MessageContext& c, const Bytes& m);
// Checks the datatype at `at` of `m`; returns its encoded length.
size_t CheckDatatypeMessage(const Hdf5MessageContext& c, const Bytes& m, size_t at, int depth);
void CheckFillMessage(const Hdf5MessageContext& c, const Bytes& m);
void CheckLayoutMessage(const Hdf5MessageContext& c, const Bytes& m);
void CheckPipelineMessage(const Hdf5MessageContext& c, const Bytes& m);

}  // namespace gpufeed
