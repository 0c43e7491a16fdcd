// Compound (struct) datasets, as PyTables tables and pandas format="table" write them: each
// numeric member is a field named "dataset.member", read through libhdf5 into a memory
// compound type holding that one member (libhdf5 picks the member out of each record, as h5py
// does for f["t"]["member"]). An array member (shape (3,)) adds its shape to the field's.
//
// Also the memory type of any element libhdf5 reads for gpufeed (Hdf5DatasetMemoryType).
//
// Thread-safety: call under the libhdf5 lock (Hdf5Lock).
#pragma once

#include <hdf5.h>

#include <optional>
#include <string>
#include <vector>

#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/dataset.h"

namespace gpufeed {

// "table.col" names member "col" of compound dataset "table" when no object "table.col"
// exists and "table" is a compound dataset: {"table", "col"}; else nullopt.
struct Hdf5MemberName {
  std::string dataset;
  std::string member;
};
std::optional<Hdf5MemberName> SplitHdf5MemberName(hid_t file_id, const std::string& name);

// The members of compound dataset `dataset` (in the type's order), or empty when it is not
// a compound dataset.
std::vector<std::string> Hdf5CompoundMembers(hid_t file_id, const std::string& dataset);

// The fields a file holds when none are named: its datasets ("/a"), a compound dataset as
// its members that gpufeed reads ("/table.x"; strings and the like left out). Takes the lock.
std::vector<std::string> Hdf5DefaultFields(hid_t file_id, const std::vector<std::string>& datasets);

// The file type of member `member` of compound `type`, or Error(kNotFound) naming `what` and
// the members there; a string, variable-length, reference, opaque or nested compound member
// (or an array of one) is refused (kUnsupported) naming it and what it is.
Hdf5Id Hdf5MemberType(hid_t type, const std::string& member, const std::string& what);

// The element type of `type`: its base type for an array type (whose dimensions are appended
// to `array_dims`), else a copy of `type`.
Hdf5Id Hdf5ArrayBase(hid_t type, std::vector<int64_t>* array_dims);

// The file type of one element of `ds` (dataset type `type`, or its member ds.member) and
// the type its dtype comes from (an array member's base, the array's dimensions beside it).
// A whole compound (ds.member empty) is refused naming the fields that read its members.
struct Hdf5ElementType {
  Hdf5Id element;
  Hdf5Id base;
  std::vector<int64_t> array_dims;
};
Hdf5ElementType Hdf5ElementTypeOf(const Hdf5Dataset& ds, hid_t type, const std::string& what);

// Once ReadTypeAndShape read `t.base` into `ds`: the array's dimensions extend the per-sample
// shape, ds.copy_file_layout is decided, and a member says so in ds.type_conversion.
void AdoptHdf5ElementType(Hdf5Dataset& ds, const Hdf5ElementType& t);

// The memory type H5Dread reads `ds`'s elements into, `element_type` being the file type of
// one element (a member's for a compound member): the file's own type when
// ds.copy_file_layout, else Hdf5MemoryType of the dtype (an array of it for an array member);
// for a compound member, a compound holding that member alone.
Hdf5Id Hdf5DatasetMemoryType(const Hdf5Dataset& ds, hid_t element_type, const std::string& what);

// Throws Error(kUnsupported) naming `what` unless ds.library_memory_type is what
// Hdf5DatasetMemoryType makes for `ds`'s dtype and shape.
void CheckHdf5DatasetMemoryType(const Hdf5Dataset& ds, const std::string& what);

}  // namespace gpufeed
