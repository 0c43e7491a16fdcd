#include "sources/hdf5/format/dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <vector>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

std::string ClassName(H5T_class_t c) {
  switch (c) {
    case H5T_COMPOUND:
      return "compound";
    case H5T_STRING:
      return "string";
    case H5T_VLEN:
      return "variable-length";
    case H5T_REFERENCE:
      return "reference";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_ARRAY:
      return "array";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_TIME:
      return "time";
    default:
      return fmt::format("class {}", static_cast<int>(c));
  }
}

// The standard layout of a float dtype: sign, exponent and mantissa bits and exponent bias.
struct FloatLayout {
  DType dtype;
  size_t size, spos, epos, esize, mpos, msize, ebias;
};

constexpr FloatLayout kFloatLayouts[] = {
    {DType::kFloat16, 2, 15, 10, 5, 0, 10, 15},
    {DType::kBFloat16, 2, 15, 7, 8, 0, 7, 127},
    {DType::kFloat32, 4, 31, 23, 8, 0, 23, 127},
    {DType::kFloat64, 8, 63, 52, 11, 0, 52, 1023},
};

// The byte order: little- or big-endian (swapped after reading), or VAX (libhdf5 converts
// it); Error(kUnsupported) for any other.
void ReadByteOrder(hid_t type, size_t size, const std::string& what, Hdf5TypeLayout& out,
                   std::vector<std::string>& differences) {
  if (size == 1) return;
  const H5T_order_t order = H5Tget_order(type);
  if (order == H5T_ORDER_LE) return;
  if (order == H5T_ORDER_BE) {
    out.big_endian = true;
  } else if (order == H5T_ORDER_VAX) {
    differences.push_back("VAX byte order");
  } else {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: byte order {} is not supported (little-endian, big-endian and "
                            "VAX are)",
                            what, static_cast<int>(order)));
  }
}

// Fewer bits than the bytes hold, or bits not at offset 0.
void ReadPrecision(hid_t type, size_t size, std::vector<std::string>& differences) {
  const size_t precision = H5Tget_precision(type);
  const int offset = H5Tget_offset(type);
  if (precision == 8 * size && offset == 0) return;
  differences.push_back(fmt::format("{}-bit precision at bit offset {}", precision, offset));
}

Hdf5TypeLayout IntegerLayout(hid_t type, size_t size, const std::string& what) {
  const H5T_sign_t sign = H5Tget_sign(type);
  if (sign != H5T_SGN_2 && sign != H5T_SGN_NONE) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: integers of sign scheme {} are not supported", what,
                            static_cast<int>(sign)));
  }
  const bool is_signed = sign == H5T_SGN_2;
  Hdf5TypeLayout out;
  switch (size) {
    case 1:
      out.dtype = is_signed ? DType::kInt8 : DType::kUInt8;
      break;
    case 2:
      out.dtype = is_signed ? DType::kInt16 : DType::kUInt16;
      break;
    case 4:
      out.dtype = is_signed ? DType::kInt32 : DType::kUInt32;
      break;
    case 8:
      out.dtype = is_signed ? DType::kInt64 : DType::kUInt64;
      break;
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}-byte integers are not supported", what, size));
  }
  std::vector<std::string> differences;
  ReadByteOrder(type, size, what, out, differences);
  ReadPrecision(type, size, differences);
  out.conversion = fmt::format("{}", fmt::join(differences, ", "));
  return out;
}

// PyTables stores bool as an 8-bit bitfield: it reads as bool (each byte checked to be 0 or 1
// as it is read). Wider bitfields read as unsigned integers of
// their width, as h5py reads them. libhdf5 converts bitfields only into other bitfields, so one
// whose bits gpufeed cannot read itself is refused.
Hdf5TypeLayout BitfieldLayout(hid_t type, size_t size, const std::string& what) {
  Hdf5TypeLayout out;
  out.bitfield = true;
  switch (size) {
    case 1:
      out.dtype = DType::kBool;
      break;
    case 2:
      out.dtype = DType::kUInt16;
      break;
    case 4:
      out.dtype = DType::kUInt32;
      break;
    case 8:
      out.dtype = DType::kUInt64;
      break;
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}-byte bitfields are not supported (1, 2, 4 and 8 bytes are)",
                              what, size));
  }
  std::vector<std::string> differences;
  ReadByteOrder(type, size, what, out, differences);
  ReadPrecision(type, size, differences);
  if (!differences.empty()) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a bitfield with {} is not supported (bitfields using every bit "
                            "of 1, 2, 4 or 8 bytes, little- or big-endian, are)",
                            what, fmt::join(differences, ", ")));
  }
  return out;
}

Hdf5TypeLayout FloatTypeLayout(hid_t type, size_t size, const std::string& what) {
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
  const FloatLayout* standard = nullptr;
  for (const auto& l : kFloatLayouts) {
    if (l.size == size && l.esize == esize && l.msize == msize) standard = &l;
  }
  if (standard == nullptr) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a {}-byte float with a {}-bit exponent and {}-bit mantissa is "
                            "not supported (float16, bfloat16, float32, float64 are)",
                            what, size, esize, msize));
  }
  Hdf5TypeLayout out;
  out.dtype = standard->dtype;
  std::vector<std::string> differences;
  ReadByteOrder(type, size, what, out, differences);
  ReadPrecision(type, size, differences);
  if (spos != standard->spos || epos != standard->epos || mpos != standard->mpos) {
    differences.push_back(
        fmt::format("sign, exponent and mantissa at bits {}, {}, {}", spos, epos, mpos));
  }
  if (const size_t ebias = H5Tget_ebias(type); ebias != standard->ebias) {
    differences.push_back(fmt::format("exponent bias {}", ebias));
  }
  if (H5Tget_norm(type) != H5T_NORM_IMPLIED) differences.push_back("no implied mantissa bit");
  out.conversion = fmt::format("{}", fmt::join(differences, ", "));
  return out;
}

}  // namespace

Hdf5TypeLayout ReadHdf5TypeLayout(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_INTEGER) return IntegerLayout(type, size, what);
  if (cls == H5T_FLOAT) return FloatTypeLayout(type, size, what);
  if (cls == H5T_BITFIELD) return BitfieldLayout(type, size, what);
  if (cls == H5T_ENUM) {
    Hdf5Id base(H5Tget_super(type));
    if (H5Tget_class(base.get()) != H5T_INTEGER) {
      throw Error(ErrorCode::kUnsupported, fmt::format("{}: enum of a non-integer", what));
    }
    // An enum reads as its base integers (libhdf5 converts an enum into numbers).
    Hdf5TypeLayout out = IntegerLayout(base.get(), size, what);
    if (!out.conversion.empty()) {
      // An enum reads as stored (compound.h: Hdf5DatasetMemoryType), so its base must be too.
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: an enum over integers libhdf5 would convert ({}) is not "
                              "supported",
                              what, out.conversion));
    }
    // h5py stores bool as an int8 enum {FALSE: 0, TRUE: 1}.
    if (size == 1 && H5Tget_nmembers(type) == 2) {
      char* a = H5Tget_member_name(type, 0);
      char* b = H5Tget_member_name(type, 1);
      const bool is_bool = a && b && std::strcmp(a, "FALSE") == 0 && std::strcmp(b, "TRUE") == 0;
      H5free_memory(a);
      H5free_memory(b);
      if (is_bool) out.dtype = DType::kBool;
    }
    return out;
  }
  std::string detail = ClassName(cls);
  if (cls == H5T_STRING) {
    detail = H5Tis_variable_str(type) > 0 ? "variable-length string" : "fixed-length string";
  }
  throw Error(
      ErrorCode::kUnsupported,
      fmt::format("{}: dtype {} is not supported; gpufeed reads bool, integer, bitfield and "
                  "float datasets, and variable-length sequences of those and strings",
                  what, detail));
}

DType MapHdf5Type(hid_t type, const std::string& what) {
  return ReadHdf5TypeLayout(type, what).dtype;
}

Hdf5Id Hdf5MemoryType(DType dtype, bool bitfield) {
  if (bitfield) {
    switch (DTypeSize(dtype)) {
      case 1:
        return Hdf5Id(H5Tcopy(H5T_NATIVE_B8));
      case 2:
        return Hdf5Id(H5Tcopy(H5T_NATIVE_B16));
      case 4:
        return Hdf5Id(H5Tcopy(H5T_NATIVE_B32));
      default:
        return Hdf5Id(H5Tcopy(H5T_NATIVE_B64));
    }
  }
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_UINT8));
    case DType::kInt8:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_INT8));
    case DType::kInt16:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_INT16));
    case DType::kUInt16:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_UINT16));
    case DType::kInt32:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_INT32));
    case DType::kUInt32:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_UINT32));
    case DType::kInt64:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_INT64));
    case DType::kUInt64:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_UINT64));
    case DType::kFloat32:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_FLOAT));
    case DType::kFloat64:
      return Hdf5Id(H5Tcopy(H5T_NATIVE_DOUBLE));
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
  }
  // The fields shrink before the precision and the precision before the size (libhdf5 keeps
  // each inside the next).
  const FloatLayout& l = kFloatLayouts[dtype == DType::kFloat16 ? 0 : 1];
  Hdf5Id t(H5Tcopy(H5T_IEEE_F32LE));
  if (!t.valid() || H5Tset_fields(t.get(), l.spos, l.epos, l.esize, l.mpos, l.msize) < 0 ||
      H5Tset_precision(t.get(), 8 * l.size) < 0 || H5Tset_size(t.get(), l.size) < 0 ||
      H5Tset_ebias(t.get(), l.ebias) < 0) {
    throw Error(ErrorCode::kUnsupported, fmt::format("cannot make a libhdf5 {} type: {}",
                                                     DTypeName(dtype), Hdf5ErrorMessage()));
  }
  return t;
}

void CheckHdf5MemoryType(hid_t memory_type, DType dtype, const std::string& what, bool bitfield) {
  const Hdf5Id expected = Hdf5MemoryType(dtype, bitfield);
  if (H5Tequal(memory_type, expected.get()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: libhdf5 would convert into a memory type other than the native "
                            "{} type, so its values could differ from h5py's; refusing it",
                            what, DTypeName(dtype)));
  }
}

}  // namespace gpufeed
