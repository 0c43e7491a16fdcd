#include "gpufeed/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::kBool, "bool", 1},
    {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt8, "uint8", 1},
    {DType::kUInt16, "uint16", 2},
    {DType::kUInt32, "uint32", 4},
    {DType::kUInt64, "uint64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
}};

const DTypeInfo& Info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  GPUFEED_ASSERT(index < kDTypes.size() && kDTypes[index].dtype == dtype, "unknown dtype");
  return kDTypes[index];
}

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  if (name == "half") return DType::kFloat16;
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  return std::nullopt;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 || dtype == DType::kFloat32 ||
         dtype == DType::kFloat64;
}

// IEEE 754 binary16 conversion with round-to-nearest-even, handling subnormals, infinities
// and NaN. Written out because C++20 has no std::float16_t on g++ 12.
uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) {  // inf or NaN; keep NaN quiet
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u | (mantissa >> 13) : 0));
  }
  const int32_t half_exponent = static_cast<int32_t>(exponent) - 127 + 15;
  if (half_exponent >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: inf
  if (half_exponent <= 0) {
    if (half_exponent < -10) return static_cast<uint16_t>(sign);  // underflow: signed zero
    mantissa |= 0x800000u;  // implicit leading one
    const uint32_t shift = static_cast<uint32_t>(14 - half_exponent);
    uint32_t half_mantissa = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
    return static_cast<uint16_t>(sign | half_mantissa);
  }
  uint32_t half = sign | (static_cast<uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const uint32_t remainder = mantissa & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int32_t e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

}  // namespace gpufeed
