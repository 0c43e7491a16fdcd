// Field-by-field checks of the object header messages libhdf5 decodes when it opens a dataset
// (dataspace, datatype, fill value, data layout, filter pipeline), run by gpufeed's structure
// walk (hdf5_structure.h) before libhdf5 reads them: every length and count inside its message,
// ranks, nesting and filter counts bounded.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "sources/hdf5/format/metadata_bytes.h"

namespace gpufeed {

// What the checks need from the file: its path for errors and its field widths.
struct Hdf5MessageContext {
  const std::string& path;
  size_t sizeof_addr;
  size_t sizeof_size;
  // Throws Error(kCorruptData) "<path>: damaged HDF5 metadata: <what>".
  [[noreturn]] void Damaged(const std::string& what) const;
  // Throws Error(kUnsupported) "<path>: <what>": a message of a newer HDF5 format version
  // than libhdf5 1.10.8 (which opens the dataset after these checks) reads.
  [[noreturn]] void Unsupported(const std::string& what) const;
};

// Returns the dataspace's element count (1 for a scalar, 0 for a null dataspace), or nullopt
// when it does not fit 64 bits (the dataset's open refuses that shape).
std::optional<uint64_t> CheckDataspaceMessage(const Hdf5MessageContext& c, const Bytes& m);
// Checks the datatype at `at` of `m`; returns its encoded length.
size_t CheckDatatypeMessage(const Hdf5MessageContext& c, const Bytes& m, size_t at, int depth);
void CheckFillMessage(const Hdf5MessageContext& c, const Bytes& m);
// Versions 1 and 2 (HDF5 1.6 and older), 3 and 4; version 5 (HDF5 2.0) is refused as
// unsupported. Returns the bytes of compact data the message holds, or nullopt for the other
// layouts.
std::optional<uint64_t> CheckLayoutMessage(const Hdf5MessageContext& c, const Bytes& m);
void CheckPipelineMessage(const Hdf5MessageContext& c, const Bytes& m);
// Group info (new-style groups): version 0, flags, the optional link-count fields.
void CheckGroupInfoMessage(const Hdf5MessageContext& c, const Bytes& m);
// The superblock extension's driver info: libhdf5 1.10.8 copies the stated length of driver
// data without comparing it with the message.
void CheckDriverInfoMessage(const Hdf5MessageContext& c, const Bytes& m);
// The superblock extension's file space info: version, then the fixed fields of that version
// (the addresses of persistent free-space managers that may follow are not checked).
void CheckFileSpaceInfoMessage(const Hdf5MessageContext& c, const Bytes& m);
// The superblock extension's shared message table pointer: version 0, address, index count.
void CheckSharedTableMessage(const Hdf5MessageContext& c, const Bytes& m);

// What one object header's messages said, for the checks that span messages.
struct Hdf5DatasetMessages {
  bool has_dataspace = false;
  std::optional<uint64_t> elements;      // from the dataspace
  std::optional<uint64_t> type_size;     // from the datatype
  std::optional<uint64_t> shared_type;   // a committed datatype's object header
  std::optional<uint64_t> compact_size;  // bytes of compact data in the layout message
};

// A compact layout must hold exactly elements x element size bytes: libhdf5 1.10.8 reads a
// dataset's elements from the message without comparing (a message holding none: a copy from
// a null pointer, a crash). REQUIRES: m.compact_size. Throws Error(kCorruptData) naming the
// sizes.
void CheckCompactLayout(const Hdf5MessageContext& c, const Hdf5DatasetMessages& m);

}  // namespace gpufeed
