// Element types of sample fields, with their sizes and names.
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpufeed {

enum class DType : uint8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// NumPy-style name: "float32", "int64", "bool", "bfloat16".
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; nullopt for an unknown name.
std::optional<DType> ParseDType(std::string_view name);
bool IsFloating(DType dtype);

// Half-precision conversions (round to nearest even), used by the cast transforms.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

}  // namespace gpufeed
