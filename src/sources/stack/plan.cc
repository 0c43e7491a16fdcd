#include "sources/stack/plan.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// One element, read whatever its dtype: integers (bool included) exactly as a 128-bit
// integer, floats as a double (float16/bfloat16/float32 widen exactly).
struct Element {
  bool is_float = false;
  __int128 integer = 0;
  double real = 0;
};

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

Element Read(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kBool:
      return {.integer = Load<uint8_t>(p) != 0 ? 1 : 0};
    case DType::kInt8:
      return {.integer = Load<int8_t>(p)};
    case DType::kInt16:
      return {.integer = Load<int16_t>(p)};
    case DType::kInt32:
      return {.integer = Load<int32_t>(p)};
    case DType::kInt64:
      return {.integer = Load<int64_t>(p)};
    case DType::kUInt8:
      return {.integer = Load<uint8_t>(p)};
    case DType::kUInt16:
      return {.integer = Load<uint16_t>(p)};
    case DType::kUInt32:
      return {.integer = Load<uint32_t>(p)};
    case DType::kUInt64:
      return {.integer = Load<uint64_t>(p)};
    case DType::kFloat16:
      return {.is_float = true, .real = HalfToFloat(Load<uint16_t>(p))};
    case DType::kBFloat16:
      return {.is_float = true, .real = BFloat16ToFloat(Load<uint16_t>(p))};
    case DType::kFloat32:
      return {.is_float = true, .real = Load<float>(p)};
    case DType::kFloat64:
      return {.is_float = true, .real = Load<double>(p)};
  }
  return {};
}

// The integer range of an integer dtype (bool: [0, 1]).
std::pair<__int128, __int128> IntegerRange(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return {0, 1};
    case DType::kInt8:
      return {INT8_MIN, INT8_MAX};
    case DType::kInt16:
      return {INT16_MIN, INT16_MAX};
    case DType::kInt32:
      return {INT32_MIN, INT32_MAX};
    case DType::kInt64:
      return {INT64_MIN, INT64_MAX};
    case DType::kUInt8:
      return {0, UINT8_MAX};
    case DType::kUInt16:
      return {0, UINT16_MAX};
    case DType::kUInt32:
      return {0, UINT32_MAX};
    default:
      return {0, static_cast<__int128>(UINT64_MAX)};
  }
}

// The float of dtype `to` nearest `value`, widened back to double (NaN and inf kept).
double RoundTo(DType to, double value) {
  switch (to) {
    case DType::kFloat16:
      return HalfToFloat(FloatToHalf(static_cast<float>(value)));
    case DType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(value)));
    case DType::kFloat32:
      return static_cast<float>(value);
    default:
      return value;
  }
}

void WriteFloat(DType to, double value, std::byte* p) {
  switch (to) {
    case DType::kFloat16:
      Store(p, FloatToHalf(static_cast<float>(value)));
      break;
    case DType::kBFloat16:
      Store(p, FloatToBFloat16(static_cast<float>(value)));
      break;
    case DType::kFloat32:
      Store(p, static_cast<float>(value));
      break;
    default:
      Store(p, value);
  }
}

void WriteInteger(DType to, __int128 v, std::byte* p) {
  switch (to) {
    case DType::kBool:
    case DType::kUInt8:
      Store(p, static_cast<uint8_t>(v));
      break;
    case DType::kInt8:
      Store(p, static_cast<int8_t>(v));
      break;
    case DType::kInt16:
      Store(p, static_cast<int16_t>(v));
      break;
    case DType::kInt32:
      Store(p, static_cast<int32_t>(v));
      break;
    case DType::kInt64:
      Store(p, static_cast<int64_t>(v));
      break;
    case DType::kUInt16:
      Store(p, static_cast<uint16_t>(v));
      break;
    case DType::kUInt32:
      Store(p, static_cast<uint32_t>(v));
      break;
    default:
      Store(p, static_cast<uint64_t>(v));
  }
}

// Empty when `e` converts to `to` (and writes it to `out` when non-null); else why not.
std::string Convert(const Element& e, DType to, std::byte* out) {
  if (IsFloating(to)) {
    if (e.is_float) {
      const double rounded = RoundTo(to, e.real);
      if (std::isfinite(e.real) && !std::isfinite(rounded)) {
        return fmt::format("{} is beyond {}'s range", e.real, DTypeName(to));
      }
      if (out != nullptr) WriteFloat(to, e.real, out);
      return {};
    }
    // 2^64 and beyond do not occur: integers come from at most 64 bits.
    const double real = static_cast<double>(e.integer);
    const double rounded = RoundTo(to, real);
    if (!std::isfinite(rounded) || rounded >= 18446744073709551616.0 ||
        static_cast<__int128>(rounded) != e.integer) {
      return fmt::format("{} has no exact {}", static_cast<long double>(e.integer), DTypeName(to));
    }
    if (out != nullptr) WriteFloat(to, real, out);
    return {};
  }
  const auto [lo, hi] = IntegerRange(to);
  __int128 v = e.integer;
  if (e.is_float) {
    if (!std::isfinite(e.real) || e.real != std::trunc(e.real)) {
      return fmt::format("{} is not an integer, which {} needs", e.real, DTypeName(to));
    }
    // Beyond +-2^64 cannot fit any integer dtype (and would overflow the cast).
    if (std::fabs(e.real) >= 18446744073709551616.0) {
      return fmt::format("{} does not fit {}", e.real, DTypeName(to));
    }
    v = static_cast<__int128>(e.real);
  }
  if (v < lo || v > hi) {
    return fmt::format("{} does not fit {}", static_cast<long double>(v), DTypeName(to));
  }
  if (out != nullptr) WriteInteger(to, v, out);
  return {};
}

bool HasGlob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string ColumnList(const Schema& schema) {
  std::string all;
  for (const auto& f : schema.fields) all += (all.empty() ? "" : ", ") + f.name;
  return all;
}

// The columns `name` stands for: itself, or a pattern's matches in schema order.
std::vector<int> Match(const Schema& schema, const std::string& name, const std::string& field,
                       const std::string& what, const std::string& unmatched) {
  const int exact = schema.IndexOf(name);
  if (exact >= 0) return {exact};
  std::vector<int> matched;
  if (HasGlob(name)) {
    for (size_t c = 0; c < schema.fields.size(); ++c) {
      if (schema.fields[c].name != unmatched &&
          fnmatch(name.c_str(), schema.fields[c].name.c_str(), 0) == 0) {
        matched.push_back(static_cast<int>(c));
      }
    }
  }
  if (matched.empty()) {
    throw Error(ErrorCode::kNotFound,
                fmt::format("{}: field '{}': {} '{}' matches no column (columns: {})", what, field,
                            HasGlob(name) ? "pattern" : "name", name, ColumnList(schema)));
  }
  return matched;
}

// The spec of output field `f` from its columns, checked to agree.
FieldSpec StackedSpec(const Schema& schema, const StackedField& f, const std::vector<int>& columns,
                      const std::string& what) {
  const FieldSpec& first = schema.fields[columns.front()];
  for (int c : columns) {
    const FieldSpec& spec = schema.fields[c];
    if (spec.shape != first.shape) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: field '{}' stacks columns of different shapes: {} and {}", what,
                              f.name, first.ToString(), spec.ToString()));
    }
    if (!f.dtype && spec.dtype != first.dtype) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: field '{}' stacks columns of different dtypes: {} and {}; "
                              "give the field a dtype to convert them to",
                              what, f.name, first.ToString(), spec.ToString()));
    }
  }
  FieldSpec out{.name = f.name, .dtype = f.dtype.value_or(first.dtype), .shape = first.shape};
  if (f.stack) out.shape.insert(out.shape.begin(), static_cast<int64_t>(columns.size()));
  (void)out.SampleBytes();  // checked: K times a column's size may overflow
  return out;
}

}  // namespace

StackPlan PlanStack(const Schema& schema, const std::vector<StackedField>& select,
                    const std::string& what, const std::string& unmatched) {
  StackPlan plan;
  std::set<std::string> names;
  std::set<int> used;
  for (const StackedField& f : select) {
    if (f.name.empty() || !names.insert(f.name).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: {}", what,
                              f.name.empty() ? "a field without a name"
                                             : fmt::format("field '{}' given twice", f.name)));
    }
    std::vector<int> columns;
    for (const std::string& name : f.columns) {
      for (int c : Match(schema, name, f.name, what, unmatched)) columns.push_back(c);
    }
    if (columns.empty() || (!f.stack && columns.size() != 1)) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: field '{}' takes {} columns; {}", what, f.name, columns.size(),
                              f.stack ? "a stacked field needs at least one"
                                      : "an unstacked field is exactly one column"));
    }
    plan.fields.push_back({StackedSpec(schema, f, columns, what), columns});
    used.insert(columns.begin(), columns.end());
  }
  plan.used_columns.assign(used.begin(), used.end());
  return plan;
}

int64_t ConvertElements(DType from, const std::byte* src, DType to, std::byte* dst, int64_t count) {
  const size_t in = DTypeSize(from);
  const size_t out = DTypeSize(to);
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(count) * in);
    return -1;
  }
  if (from == DType::kFloat64 && to == DType::kFloat32) {  // the common case, kept tight
    for (int64_t i = 0; i < count; ++i) {
      const double d = Load<double>(src + i * 8);
      const float f = static_cast<float>(d);
      if (std::isinf(f) && std::isfinite(d)) return i;
      Store(dst + i * 4, f);
    }
    return -1;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (!Convert(Read(from, src + i * in), to, dst + i * out).empty()) return i;
  }
  return -1;
}

std::string RefusalReason(DType from, const std::byte* src, DType to) {
  return Convert(Read(from, src), to, nullptr);
}

void InterleaveColumns(std::span<const std::byte* const> columns, size_t sample_bytes, int64_t rows,
                       std::byte* out) {
  const size_t k = columns.size();
  const size_t row_bytes = k * sample_bytes;
  if (sample_bytes == 4) {  // scalar float32/int32 columns: the common table
    for (int64_t r = 0; r < rows; ++r) {
      std::byte* row = out + static_cast<size_t>(r) * row_bytes;
      for (size_t c = 0; c < k; ++c) std::memcpy(row + c * 4, columns[c] + r * 4, 4);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::byte* row = out + static_cast<size_t>(r) * row_bytes;
    for (size_t c = 0; c < k; ++c) {
      std::memcpy(row + c * sample_bytes, columns[c] + static_cast<size_t>(r) * sample_bytes,
                  sample_bytes);
    }
  }
}

}  // namespace gpufeed
