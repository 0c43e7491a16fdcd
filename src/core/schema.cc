#include "gpufeed/schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <charconv>

#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {

int64_t FieldSpec::ElementsPerSample() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string FieldSpec::ToString() const {
  return fmt::format("{}: {}[{}]", name, DTypeName(dtype), fmt::join(shape, ","));
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
  size_t bytes = 0;
  for (const auto& f : fields) bytes += f.SampleBytes();
  return bytes;
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
    const int64_t value = ParseNumber<int64_t>(dim).value_or(0);
    if (value <= 0) {
      BadSpec(spec, part, fmt::format("dimension '{}' is not a positive integer", dim));
    }
    field.shape.push_back(value);
    if (comma == std::string_view::npos) break;
    dims.remove_prefix(comma + 1);
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
  return schema;
}

}  // namespace gpufeed
