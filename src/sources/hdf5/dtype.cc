#include "sources/hdf5/dtype.h"

#include <fmt/format.h>

#include <cstring>

#include "gpufeed/error.h"
#include "sources/hdf5/library.h"

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

DType IntegerDType(hid_t type, size_t size, const std::string& what) {
  const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
  switch (size) {
    case 1:
      return is_signed ? DType::kInt8 : DType::kUInt8;
    case 2:
      return is_signed ? DType::kInt16 : DType::kUInt16;
    case 4:
      return is_signed ? DType::kInt32 : DType::kUInt32;
    case 8:
      return is_signed ? DType::kInt64 : DType::kUInt64;
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}-byte integers are not supported", what, size));
  }
}

}  // namespace

DType MapHdf5Type(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_INTEGER) return IntegerDType(type, size, what);
  if (cls == H5T_FLOAT) {
    size_t spos, epos, esize, mpos, msize;
    H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
    if (size == 2 && esize == 5 && msize == 10) return DType::kFloat16;
    if (size == 2 && esize == 8 && msize == 7) return DType::kBFloat16;
    if (size == 4 && esize == 8 && msize == 23) return DType::kFloat32;
    if (size == 8 && esize == 11 && msize == 52) return DType::kFloat64;
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a {}-byte float with a {}-bit exponent and {}-bit mantissa is "
                            "not supported (float16, bfloat16, float32, float64 are)",
                            what, size, esize, msize));
  }
  if (cls == H5T_ENUM) {
    Hdf5Id base(H5Tget_super(type));
    if (H5Tget_class(base.get()) != H5T_INTEGER) {
      throw Error(ErrorCode::kUnsupported, fmt::format("{}: enum of a non-integer", what));
    }
    // h5py stores bool as an int8 enum {FALSE: 0, TRUE: 1}.
    if (size == 1 && H5Tget_nmembers(type) == 2) {
      char* a = H5Tget_member_name(type, 0);
      char* b = H5Tget_member_name(type, 1);
      const bool is_bool = a && b && std::strcmp(a, "FALSE") == 0 && std::strcmp(b, "TRUE") == 0;
      H5free_memory(a);
      H5free_memory(b);
      if (is_bool) return DType::kBool;
    }
    return IntegerDType(base.get(), size, what);
  }
  std::string detail = ClassName(cls);
  if (cls == H5T_STRING) {
    detail = H5Tis_variable_str(type) > 0 ? "variable-length string" : "fixed-length string";
  }
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: dtype {} is not supported; gpufeed reads bool, integer and float "
                          "datasets",
                          what, detail));
}

}  // namespace gpufeed
