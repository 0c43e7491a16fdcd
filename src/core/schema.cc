#include "gpufeed/schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <charconv>
#include <limits>

#include "core/checked_math.h"
#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr uint64_t kMaxCount = std::numeric_limits<int64_t>::max();

// The checked product of dims [first, end) of `field`'s shape.
int64_t Elements(const FieldSpec& field, size_t first, std::string_view what) {
  // Every dimension is checked first, then the product: a zero anywhere must not hide an
  // overflowing rest, so (0, 2^62, 2^62) is refused as well as (2^62, 2^62, 0).
  uint64_t nonzero = 1;
  bool zero = false;
  for (size_t i = first; i < field.shape.size(); ++i) {
    const int64_t d = field.shape[i];
    if (d < 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("field {}: negative dimension {}", field.ToString(), d));
    }
    if (d == 0) {
      zero = true;
      continue;
    }
    const auto next = CheckedMul(nonzero, static_cast<uint64_t>(d));
    if (!next || *next > kMaxCount) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("field {}: the element count per {} overflows 63 bits",
                              field.ToString(), what));
    }
    nonzero = *next;
  }
  return zero ? 0 : static_cast<int64_t>(nonzero);
}

size_t Bytes(const FieldSpec& field, int64_t elements, std::string_view what) {
  const auto bytes = CheckedMul(static_cast<uint64_t>(elements), DTypeSize(field.dtype));
  if (!bytes || *bytes > kMaxCount) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("field {}: the bytes per {} overflow 63 bits", field.ToString(), what));
  }
  return static_cast<size_t>(*bytes);
}

}  // namespace

int64_t FieldSpec::ElementsPerSample() const {
  if (variable()) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("field {} is variable-length: its samples have no one size (batch "
                            "it padded or packed: gpufeed/varlen.h)",
                            ToString()));
  }
  return Elements(*this, 0, "sample");
}

size_t FieldSpec::SampleBytes() const { return Bytes(*this, ElementsPerSample(), "sample"); }

int64_t FieldSpec::ElementsPerItem() const {
  GPUFEED_ASSERT(variable(), "ElementsPerItem of a fixed-size field");
  return Elements(*this, 1, "item");
}

size_t FieldSpec::ItemBytes() const { return Bytes(*this, ElementsPerItem(), "item"); }

std::string FieldSpec::ToString() const {
  std::vector<std::string> dims;
  for (int64_t d : shape) dims.push_back(d == kVariableDim ? "*" : std::to_string(d));
  return fmt::format("{}: {}[{}]", name, DTypeName(dtype), fmt::join(dims, ","));
}

bool Schema::HasVariable() const {
  for (const auto& f : fields) {
    if (f.variable()) return true;
  }
  return false;
}

int Schema::IndexOf(std::string_view name) const {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const FieldSpec& Schema::Field(std::string_view name) const {
  const int index = IndexOf(name);
  if (index < 0) {
    std::vector<std::string_view> names;
    for (const auto& f : fields) names.push_back(f.name);
    throw Error(ErrorCode::kNotFound,
                fmt::format("no field '{}'; the fields are: {}", name, fmt::join(names, ", ")));
  }
  return fields[static_cast<size_t>(index)];
}

size_t Schema::SampleBytes() const {
  uint64_t bytes = 0;
  for (const auto& f : fields) {
    const auto sum = CheckedAdd(bytes, f.SampleBytes());
    if (!sum || *sum > kMaxCount) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("schema {}: the bytes per sample overflow 63 bits", ToString()));
    }
    bytes = *sum;
  }
  return static_cast<size_t>(bytes);
}

std::string Schema::ToString() const {
  std::vector<std::string> parts;
  for (const auto& f : fields) parts.push_back(f.ToString());
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

[[noreturn]] void BadSpec(std::string_view spec, std::string_view part, std::string_view why) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("bad schema '{}': in '{}': {} (expected e.g. "
                          "'mel:float32[1,64,32],label:int64[]')",
                          spec, part, why));
}

FieldSpec ParseField(std::string_view spec, std::string_view part) {
  const size_t colon = part.find(':');
  if (colon == std::string_view::npos) BadSpec(spec, part, "no ':' between name and dtype");
  FieldSpec field;
  field.name = std::string(Trim(part.substr(0, colon)));
  if (field.name.empty()) BadSpec(spec, part, "empty field name");
  std::string_view rest = Trim(part.substr(colon + 1));
  const size_t open = rest.find('[');
  const std::string_view dtype_name = Trim(rest.substr(0, open));
  const auto dtype = ParseDType(dtype_name);
  if (!dtype) BadSpec(spec, part, fmt::format("unknown dtype '{}'", dtype_name));
  field.dtype = *dtype;
  if (open == std::string_view::npos) return field;  // scalar
  if (rest.back() != ']') BadSpec(spec, part, "missing ']'");
  std::string_view dims = Trim(rest.substr(open + 1, rest.size() - open - 2));
  while (!dims.empty()) {
    const size_t comma = dims.find(',');
    const std::string_view dim = Trim(dims.substr(0, comma));
    if (dim == "*") {
      if (!field.shape.empty()) BadSpec(spec, part, "only the first dimension may be '*'");
      field.shape.push_back(kVariableDim);
      if (comma == std::string_view::npos) break;
      dims.remove_prefix(comma + 1);
      continue;
    }
    const int64_t value = ParseNumber<int64_t>(dim).value_or(0);
    if (value <= 0) {
      BadSpec(spec, part, fmt::format("dimension '{}' is not a positive integer", dim));
    }
    field.shape.push_back(value);
    if (comma == std::string_view::npos) break;
    dims.remove_prefix(comma + 1);
  }
  try {
    (void)(field.variable() ? field.ItemBytes() : field.SampleBytes());
  } catch (const Error& e) {
    BadSpec(spec, part, e.what());
  }
  return field;
}

}  // namespace

Schema ParseSchema(std::string_view spec) {
  Schema schema;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size() && spec[i] == '[') ++depth;
    if (i < spec.size() && spec[i] == ']') --depth;
    if (i == spec.size() || (spec[i] == ',' && depth == 0)) {
      const std::string_view part = Trim(spec.substr(start, i - start));
      if (!part.empty()) {
        FieldSpec field = ParseField(spec, part);
        if (schema.IndexOf(field.name) >= 0) BadSpec(spec, part, "field named twice");
        schema.fields.push_back(std::move(field));
      }
      start = i + 1;
    }
  }
  if (schema.fields.empty()) BadSpec(spec, spec, "no fields");
  try {
    Schema fixed;
    for (const FieldSpec& f : schema.fields) {
      if (!f.variable()) fixed.fields.push_back(f);
    }
    (void)fixed.SampleBytes();
  } catch (const Error& e) {
    BadSpec(spec, spec, e.what());
  }
  return schema;
}

}  // namespace gpufeed
