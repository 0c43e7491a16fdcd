#include "sources/hdf5/index/compound.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpufeed/dtype.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/dtype.h"

namespace gpufeed {
namespace {

std::string MemberName(hid_t type, unsigned i) {
  char* raw = H5Tget_member_name(type, i);
  std::string name = raw != nullptr ? raw : "";
  H5free_memory(raw);
  return name;
}

std::vector<std::string> MemberNames(hid_t type) {
  std::vector<std::string> out;
  const int n = H5Tget_nmembers(type);
  for (int i = 0; i < n; ++i) out.push_back(MemberName(type, static_cast<unsigned>(i)));
  return out;
}

// The type of dataset `name` when it is a compound dataset.
std::optional<Hdf5Id> CompoundType(hid_t file_id, const std::string& name) {
  if (name.empty() || H5Lexists(file_id, name.c_str(), H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  H5O_info_t info;
  // Basic fields only: the others walk storage (chunk B-trees) the structure checks guard.
  if (H5Oget_info_by_name2(file_id, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
      info.type != H5O_TYPE_DATASET) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  Hdf5Id dset(H5Dopen2(file_id, name.c_str(), H5P_DEFAULT));
  if (!dset.valid()) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  Hdf5Id type(H5Dget_type(dset.get()));
  if (!type.valid() || H5Tget_class(type.get()) != H5T_COMPOUND) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  return type;
}

// What a member (or an array of them) holds when gpufeed does not read it, or "" when it does.
std::string UnreadableKind(hid_t member_type) {
  H5T_class_t cls = H5Tget_class(member_type);
  Hdf5Id base;
  if (cls == H5T_ARRAY) {
    base = Hdf5Id(H5Tget_super(member_type));
    cls = H5Tget_class(base.get());
  }
  const std::string array = base.valid() ? "an array of " : "";
  switch (cls) {
    case H5T_STRING:
      return array + (H5Tis_variable_str(base.valid() ? base.get() : member_type) > 0
                          ? "variable-length strings"
                          : "fixed-length strings");
    case H5T_VLEN:
      return array + "variable-length sequences";
    case H5T_COMPOUND:
      return array + "a nested compound (flatten it into numeric members)";
    case H5T_REFERENCE:
      return array + "object references";
    case H5T_INTEGER:
    case H5T_FLOAT:
    case H5T_BITFIELD:
    case H5T_ENUM:
      return "";
    default:
      return array + "values that are not numeric";
  }
}

// Throws Error(kUnsupported) when `type` is a compound: its members are read as fields
// "dataset.member", which the message names.
void RefuseWholeCompound(hid_t type, const std::string& dataset, const std::string& what) {
  if (H5Tget_class(type) != H5T_COMPOUND) return;
  const std::string field = dataset.starts_with('/') ? dataset.substr(1) : dataset;
  std::vector<std::string> fields;
  for (const std::string& m : MemberNames(type)) fields.push_back(fmt::format("'{}.{}'", field, m));
  throw Error(
      ErrorCode::kUnsupported,
      fmt::format("{}: dtype compound: a compound (table) dataset is read member by member; "
                  "name its members as fields: {}",
                  what, fmt::join(fields, ", ")));
}

}  // namespace

std::optional<Hdf5MemberName> SplitHdf5MemberName(hid_t file_id, const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || name.find('/', dot) != std::string::npos) return std::nullopt;
  if (H5Lexists(file_id, name.c_str(), H5P_DEFAULT) > 0) return std::nullopt;
  H5Eclear2(H5E_DEFAULT);
  Hdf5MemberName out{name.substr(0, dot), name.substr(dot + 1)};
  if (!CompoundType(file_id, out.dataset)) return std::nullopt;
  return out;
}

std::vector<std::string> Hdf5CompoundMembers(hid_t file_id, const std::string& dataset) {
  const auto type = CompoundType(file_id, dataset);
  return type ? MemberNames(type->get()) : std::vector<std::string>{};
}

std::vector<std::string> Hdf5DefaultFields(hid_t file_id,
                                           const std::vector<std::string>& datasets) {
  Hdf5Lock lock;
  std::vector<std::string> out;
  for (const std::string& dataset : datasets) {
    const auto type = CompoundType(file_id, dataset);
    if (!type) {
      out.push_back(dataset);
      continue;
    }
    const int n = H5Tget_nmembers(type->get());
    for (int i = 0; i < n; ++i) {
      const Hdf5Id member(H5Tget_member_type(type->get(), static_cast<unsigned>(i)));
      if (!UnreadableKind(member.get()).empty()) continue;
      out.push_back(dataset + "." + MemberName(type->get(), static_cast<unsigned>(i)));
    }
  }
  return out;
}

namespace {

// libhdf5 picks members out of records at the offsets the file states and trusts them: a
// crafted member lying past its record makes it copy from beyond the buffer it converts in.
// Every member must lie within the record (a file libhdf5 wrote always does).
void CheckMembersWithinRecord(hid_t type, const std::string& what) {
  const size_t record = H5Tget_size(type);
  const int n = H5Tget_nmembers(type);
  for (int i = 0; i < n; ++i) {
    const auto index = static_cast<unsigned>(i);
    Hdf5Id member_type(H5Tget_member_type(type, index));
    const size_t offset = H5Tget_member_offset(type, index);
    const size_t size = member_type.get() < 0 ? 0 : H5Tget_size(member_type.get());
    if (size == 0 || offset > record || size > record - offset) {
      H5Eclear2(H5E_DEFAULT);
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: compound member '{}' lies outside its record: {} bytes at "
                              "offset {} of a {}-byte record",
                              what, MemberName(type, index), size, offset, record));
    }
  }
}

}  // namespace

Hdf5Id Hdf5MemberType(hid_t type, const std::string& member, const std::string& what) {
  CheckMembersWithinRecord(type, what);
  const int index = H5Tget_member_index(type, member.c_str());
  if (index < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(ErrorCode::kNotFound,
                fmt::format("{}: the compound has no member '{}'; its members are: {}", what,
                            member, fmt::join(MemberNames(type), ", ")));
  }
  Hdf5Id member_type(H5Tget_member_type(type, static_cast<unsigned>(index)));
  if (const std::string kind = UnreadableKind(member_type.get()); !kind.empty()) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: member '{}' holds {}; gpufeed reads the numeric and bool "
                            "members of a compound (and arrays of them)",
                            what, member, kind));
  }
  return member_type;
}

Hdf5Id Hdf5ArrayBase(hid_t type, std::vector<int64_t>* array_dims) {
  if (H5Tget_class(type) != H5T_ARRAY) return Hdf5Id(H5Tcopy(type));
  const int rank = H5Tget_array_ndims(type);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Tget_array_dims2(type, dims.data());
  array_dims->insert(array_dims->end(), dims.begin(), dims.end());
  return Hdf5Id(H5Tget_super(type));
}

Hdf5ElementType Hdf5ElementTypeOf(const Hdf5Dataset& ds, hid_t type, const std::string& what) {
  if (ds.member.empty()) RefuseWholeCompound(type, ds.dataset, what);
  Hdf5ElementType t;
  t.element = ds.member.empty() ? Hdf5Id(H5Tcopy(type)) : Hdf5MemberType(type, ds.member, what);
  t.base = Hdf5ArrayBase(t.element.get(), &t.array_dims);
  return t;
}

void AdoptHdf5ElementType(Hdf5Dataset& ds, const Hdf5ElementType& t) {
  ds.field.shape.insert(ds.field.shape.end(), t.array_dims.begin(), t.array_dims.end());
  // An enum is never converted by libhdf5 (Hdf5DatasetMemoryType says why), nor a member: its
  // standard layout is copied and swapped by gpufeed.
  ds.copy_file_layout =
      ds.type_conversion.empty() && (!ds.member.empty() || H5Tget_class(t.base.get()) == H5T_ENUM);
  if (!ds.member.empty()) {
    // libhdf5 picks the member out of each record.
    ds.type_conversion = fmt::format("member '{}' of a compound{}{}", ds.member,
                                     ds.type_conversion.empty() ? "" : ", ", ds.type_conversion);
  }
}

Hdf5Id Hdf5DatasetMemoryType(const Hdf5Dataset& ds, hid_t element_type, const std::string& what) {
  // Elements in their dtype's standard layout are copied as stored (gpufeed swaps the byte
  // order): libhdf5 1.10 has no conversion of its own from an enum (h5py's bool) to integers,
  // and the one h5py registers in a process that imported it takes Python's GIL, which a
  // worker holding libhdf5's lock must never wait for (the thread holding the GIL may be
  // waiting for that lock).
  Hdf5Id memory_type;
  if (ds.copy_file_layout) {
    memory_type = Hdf5Id(H5Tcopy(element_type));
  } else {
    memory_type = Hdf5MemoryType(ds.field.dtype, ds.bitfield);
    if (H5Tget_class(element_type) == H5T_ARRAY) {
      const int rank = H5Tget_array_ndims(element_type);
      std::vector<hsize_t> dims(rank > 0 ? rank : 0);
      if (rank > 0) H5Tget_array_dims2(element_type, dims.data());
      memory_type = Hdf5Id(H5Tarray_create2(memory_type.get(), rank, dims.data()));
    }
  }
  Hdf5Id out = ds.member.empty() || !memory_type.valid()
                   ? std::move(memory_type)
                   : Hdf5Id(H5Tcreate(H5T_COMPOUND, H5Tget_size(memory_type.get())));
  if (!out.valid() ||
      (!ds.member.empty() && H5Tinsert(out.get(), ds.member.c_str(), 0, memory_type.get()) < 0)) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: cannot make the memory type of {}: {}", what,
                            ds.member.empty() ? "its elements" : "member '" + ds.member + "'",
                            Hdf5ErrorMessage()));
  }
  return out;
}

void CheckHdf5DatasetMemoryType(const Hdf5Dataset& ds, const std::string& what) {
  Hdf5Id element(H5Tcopy(ds.library_memory_type->get()));
  if (!ds.member.empty()) element = Hdf5Id(H5Tget_member_type(element.get(), 0));
  std::vector<int64_t> array_dims;
  const Hdf5Id base = Hdf5ArrayBase(element.get(), &array_dims);
  if (ds.copy_file_layout) {
    // The file's own type, which ReadHdf5TypeLayout found in the dtype's standard layout.
    if (H5Tget_size(base.get()) != DTypeSize(ds.field.dtype)) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: its elements are {} bytes, not the {} of {}", what,
                              H5Tget_size(base.get()), DTypeSize(ds.field.dtype),
                              DTypeName(ds.field.dtype)));
    }
    return;
  }
  CheckHdf5MemoryType(base.get(), ds.field.dtype, what, ds.bitfield);
}

}  // namespace gpufeed
