#include "sources/varlen/varlen_common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {

int ChooseVariableField(const Source& source, const std::string& name, const char* who) {
  const Schema& schema = source.schema();
  std::vector<std::string> variable;
  for (const FieldSpec& f : schema.fields) {
    if (f.variable()) variable.push_back(f.name);
  }
  if (variable.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} has no variable-length field (its fields: {})", who,
                            source.Describe(), schema.ToString()));
  }
  const std::string chosen = name.empty() ? variable.front() : name;
  if (name.empty() && variable.size() > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} has several variable-length fields ({}); name the one to "
                            "batch",
                            who, source.Describe(), fmt::join(variable, ", ")));
  }
  const int index = schema.IndexOf(chosen);
  if (index < 0 || !schema.fields[static_cast<size_t>(index)].variable()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: '{}' is not a variable-length field of {} (those: {})", who,
                            chosen, source.Describe(), fmt::join(variable, ", ")));
  }
  if (variable.size() > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} has other variable-length fields besides '{}' ({}); a loader "
                            "batches one: pick the fields to read",
                            who, source.Describe(), chosen, fmt::join(variable, ", ")));
  }
  return index;
}

std::vector<int64_t> AllLengths(const Source& source, int field) {
  const int64_t samples = source.size();
  const FieldSpec& spec = source.schema().fields[static_cast<size_t>(field)];
  const uint64_t item = spec.ItemBytes();
  std::vector<int64_t> lengths(static_cast<size_t>(samples));
  constexpr int64_t kSlice = 1 << 16;
  std::vector<int64_t> indices;
  uint64_t total_bytes = 0;
  for (int64_t start = 0; start < samples; start += kSlice) {
    const int64_t n = std::min(kSlice, samples - start);
    indices.resize(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), start);
    std::span<int64_t> out(lengths.data() + start, static_cast<size_t>(n));
    source.ReadLengths(field, indices, out, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t length = out[static_cast<size_t>(i)];
      const auto bytes =
          length < 0 ? std::nullopt : CheckedMul(static_cast<uint64_t>(length), item);
      const auto sum = bytes ? CheckedAdd(total_bytes, *bytes) : std::nullopt;
      if (!sum || *sum > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: field {}, sample {}: length {} is negative or takes the "
                                "field past 2^63 bytes",
                                source.Describe(), spec.name, start + i, length));
      }
      total_bytes = *sum;
    }
  }
  return lengths;
}

namespace {

template <typename T>
ElementBytes Exact(double value, const std::string& what, DType dtype) {
  // The bounds as exact powers of two: [-2^(b-1), 2^(b-1)) signed, [0, 2^b) unsigned.
  constexpr int kBits =
      std::numeric_limits<T>::digits + (std::numeric_limits<T>::is_signed ? 1 : 0);
  const double kTop =
      std::numeric_limits<T>::is_signed ? std::ldexp(1.0, kBits - 1) : std::ldexp(1.0, kBits);
  const double kBottom = std::numeric_limits<T>::is_signed ? -kTop : 0.0;
  if (!std::isfinite(value) || std::trunc(value) != value || value < kBottom || value >= kTop) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} {} is not a {} value", what, value, DTypeName(dtype)));
  }
  const T v = static_cast<T>(value);
  ElementBytes out;
  std::memcpy(out.bytes.data(), &v, sizeof(T));
  out.size = sizeof(T);
  return out;
}

template <typename T>
ElementBytes Bits(T v) {
  ElementBytes out;
  std::memcpy(out.bytes.data(), &v, sizeof(T));
  out.size = sizeof(T);
  return out;
}

}  // namespace

ElementBytes EncodeElement(double value, DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::kBool:
      if (value != 0 && value != 1) {
        throw Error(ErrorCode::kInvalidArgument, fmt::format("{} {} is not a bool", what, value));
      }
      return Bits<uint8_t>(value != 0);
    case DType::kInt8:
      return Exact<int8_t>(value, what, dtype);
    case DType::kInt16:
      return Exact<int16_t>(value, what, dtype);
    case DType::kInt32:
      return Exact<int32_t>(value, what, dtype);
    case DType::kInt64:
      return Exact<int64_t>(value, what, dtype);
    case DType::kUInt8:
      return Exact<uint8_t>(value, what, dtype);
    case DType::kUInt16:
      return Exact<uint16_t>(value, what, dtype);
    case DType::kUInt32:
      return Exact<uint32_t>(value, what, dtype);
    case DType::kUInt64:
      return Exact<uint64_t>(value, what, dtype);
    case DType::kFloat16:
      return Bits<uint16_t>(FloatToHalf(static_cast<float>(value)));
    case DType::kBFloat16:
      return Bits<uint16_t>(FloatToBFloat16(static_cast<float>(value)));
    case DType::kFloat32:
      return Bits<float>(static_cast<float>(value));
    case DType::kFloat64:
      return Bits<double>(value);
  }
  throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: unknown dtype", what));
}

void FillElements(std::byte* dst, int64_t count, const ElementBytes& value) {
  if (count <= 0) return;
  const bool zero = std::all_of(value.bytes.begin(), value.bytes.begin() + value.size,
                                [](std::byte b) { return b == std::byte{0}; });
  if (zero) {
    std::memset(dst, 0, static_cast<size_t>(count) * value.size);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * value.size, value.bytes.data(), value.size);
  }
}

}  // namespace gpufeed
