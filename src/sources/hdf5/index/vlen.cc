#include "sources/hdf5/index/vlen.h"

#include <fmt/format.h>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/library.h"

namespace gpufeed {
namespace {

[[noreturn]] void Refuse(const std::string& what, const std::string& why) {
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: a variable-length dataset {} is not supported (gpufeed reads "
                          "1-D contiguous or chunked ones, items numeric or string bytes)",
                          what, why));
}

// The file's widths of addresses and lengths, and its user block.
void ReadFileWidths(hid_t file_id, Hdf5VlenType& vlen, const std::string& what) {
  Hdf5Id fcpl(H5Fget_create_plist(file_id));
  size_t sizeof_addr = 0, sizeof_size = 0;
  hsize_t userblock = 0;
  if (!fcpl.valid() || H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
      H5Pget_userblock(fcpl.get(), &userblock) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot read the file's creation properties: {}", what,
                            Hdf5ErrorMessage()));
  }
  for (size_t width : {sizeof_addr, sizeof_size}) {
    if (width != 2 && width != 4 && width != 8) {
      throw Error(
          ErrorCode::kCorruptData,
          fmt::format("{}: the file's addresses or lengths are {} bytes wide", what, width));
    }
  }
  vlen.sizeof_addr = static_cast<unsigned>(sizeof_addr);
  vlen.sizeof_size = static_cast<unsigned>(sizeof_size);
  vlen.base_address = userblock;
}

}  // namespace

bool IsHdf5VlenType(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  return cls == H5T_VLEN || (cls == H5T_STRING && H5Tis_variable_str(type) > 0);
}

Hdf5TypeLayout ReadHdf5ElementLayout(hid_t type, const std::string& what) {
  if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0) {
    Hdf5TypeLayout bytes;  // the stored bytes (ASCII or UTF-8)
    bytes.dtype = DType::kUInt8;
    return bytes;
  }
  if (H5Tget_class(type) != H5T_VLEN) return ReadHdf5TypeLayout(type, what);
  Hdf5Id base(H5Tget_super(type));
  if (!base.valid()) {
    throw Error(ErrorCode::kCorruptData, fmt::format("{}: cannot read the base type of its "
                                                     "variable-length type: {}",
                                                     what, Hdf5ErrorMessage()));
  }
  if (IsHdf5VlenType(base.get())) Refuse(what, "of variable-length items");
  return ReadHdf5TypeLayout(base.get(), what + " (the items of its variable-length type)");
}

void AdoptHdf5Vlen(Hdf5Dataset& ds, hid_t element, hid_t file_id, hid_t dcpl,
                   const std::string& what) {
  if (!IsHdf5VlenType(element)) return;
  if (ds.dims.size() != 1) Refuse(what, fmt::format("of rank {}", ds.dims.size()));
  if (ds.bitfield) Refuse(what, "of bitfields");
  if (!ds.type_conversion.empty()) {
    Refuse(what, fmt::format("of items libhdf5 would convert ({})", ds.type_conversion));
  }
  if (H5Pget_layout(dcpl) == H5D_COMPACT) Refuse(what, "with a compact layout");
  if (H5Pget_external_count(dcpl) > 0) Refuse(what, "in external storage");
  H5D_fill_value_t fill = H5D_FILL_VALUE_UNDEFINED;
  if (H5Pfill_value_defined(dcpl, &fill) < 0 || fill == H5D_FILL_VALUE_USER_DEFINED) {
    H5Eclear2(H5E_DEFAULT);
    Refuse(what, "with a fill value of its own");
  }
  Hdf5VlenType vlen;
  vlen.string = H5Tget_class(element) == H5T_STRING;
  vlen.big_endian = ds.big_endian;
  vlen.field = FieldSpec{.name = ds.field.name, .dtype = ds.field.dtype, .shape = {kVariableDim}};
  ReadFileWidths(file_id, vlen, what);
  const size_t reference = vlen.reference_bytes();
  if (!CheckedMul(static_cast<uint64_t>(ds.samples), reference)) {
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: {} references of {} bytes overflow 64 bits", what, ds.samples, reference));
  }
  ds.field.dtype = DType::kUInt8;
  ds.field.shape = {static_cast<int64_t>(reference)};
  ds.element_size = reference;
  ds.big_endian = false;  // references are little-endian
  ds.copy_file_layout = false;
  ds.vlen = std::move(vlen);
}

}  // namespace gpufeed
