#include "sources/db/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <string_view>

#include "gpufeed/error.h"
#include "sources/memory_source.h"
#include "sources/stack/plan.h"
#include "sources/varlen/ragged_source.h"

namespace gpufeed {

void ColumnTable::Append(ColumnTable&& other) {
  GPUFEED_ASSERT(other.fields == fields, "appending a table with other fields");
  offsets.resize(data.size());
  other.offsets.resize(data.size());
  for (size_t f = 0; f < data.size(); ++f) {
    if (!other.offsets[f].empty()) {  // shifted past the items held so far
      const int64_t shift = offsets[f].empty() ? 0 : offsets[f].back();
      if (!offsets[f].empty()) offsets[f].pop_back();
      for (int64_t o : other.offsets[f]) offsets[f].push_back(o + shift);
    }
    if (data[f].empty()) {
      data[f] = std::move(other.data[f]);
    } else {
      data[f].insert(data[f].end(), other.data[f].begin(), other.data[f].end());
    }
  }
  rows += other.rows;
}

std::shared_ptr<Source> NewDatabaseSource(ColumnTable table, std::string what,
                                          std::string identity) {
  if (table.rows == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: the query returned no rows; a data set needs at least one", what));
  }
  table.offsets.resize(table.fields.size());
  for (size_t f = 0; f < table.fields.size(); ++f) {
    if (table.fields[f].variable()) {
      GPUFEED_ASSERT(table.offsets[f].size() == static_cast<size_t>(table.rows) + 1 &&
                         table.data[f].size() == static_cast<size_t>(table.offsets[f].back()) *
                                                     table.fields[f].ItemBytes(),
                     "a variable-length column's offsets differ from its rows and items");
      continue;
    }
    GPUFEED_ASSERT(
        table.data[f].size() == static_cast<size_t>(table.rows) * table.fields[f].SampleBytes(),
        "column size differs from rows * sample bytes");
  }
  // std::hash of a string_view is stable within one build of libstdc++, which is what
  // processes sharing a cache run; the byte count rides along for safety.
  uint64_t hash = 0;
  for (size_t f = 0; f < table.data.size(); ++f) {
    const std::string_view bytes(reinterpret_cast<const char*>(table.data[f].data()),
                                 table.data[f].size());
    const std::string_view offsets(reinterpret_cast<const char*>(table.offsets[f].data()),
                                   table.offsets[f].size() * sizeof(int64_t));
    hash = hash * 0x9E3779B97F4A7C15ULL ^ std::hash<std::string_view>{}(bytes);
    hash = hash * 0x9E3779B97F4A7C15ULL ^ std::hash<std::string_view>{}(offsets);
  }
  Schema schema{table.fields};
  identity =
      fmt::format("{}|{}|rows={}|content={:016x}", identity, schema.ToString(), table.rows, hash);
  // The loaded table is a memory source's arrays, owned by the source.
  auto owned = std::make_shared<const ColumnTable>(std::move(table));
  std::vector<MemoryField> fields;
  std::vector<RaggedField> ragged;
  std::vector<std::string> order;
  for (size_t f = 0; f < owned->fields.size(); ++f) {
    const FieldSpec& spec = owned->fields[f];
    order.push_back(spec.name);
    if (spec.variable()) {
      ragged.push_back({.spec = spec,
                        .values = owned->data[f].data(),
                        .items = owned->offsets[f].back(),
                        .offsets = owned->offsets[f].data(),
                        .samples = owned->rows});
    } else {
      fields.push_back({.spec = spec, .data = owned->data[f].data(), .samples = owned->rows});
    }
  }
  if (!ragged.empty()) {
    return NewNamedRaggedSource(std::move(ragged), std::move(fields), owned, order, std::move(what),
                                std::move(identity));
  }
  return NewNamedMemorySource(std::move(fields), owned, std::move(what), std::move(identity));
}

std::vector<std::string> ColumnsToLoad(const std::vector<std::string>& names,
                                       const DatabaseOptions& options, const std::string& context) {
  if (options.select.empty()) {
    const bool key_asked = std::find(options.columns.begin(), options.columns.end(), options.key) !=
                           options.columns.end();
    std::vector<std::string> load;
    for (const auto& name : names) {
      if (name != options.key || key_asked) load.push_back(name);
    }
    return load;
  }
  // Names only at this point (the dtypes come with the rows): any one dtype and shape
  // resolves the names; the real checks run on the loaded columns.
  Schema by_name;
  for (const auto& name : names) {
    by_name.fields.push_back({.name = name, .dtype = DType::kFloat32, .shape = {}});
  }
  std::vector<StackedField> select = options.select;
  for (auto& f : select) f.dtype = DType::kFloat32;
  const StackPlan plan = PlanStack(by_name, select, context, options.key);
  std::vector<std::string> load;
  for (int c : plan.used_columns) load.push_back(names[c]);
  return load;
}

namespace {

// Column `c` of `table` as `dtype`: its own array, or converted into `scratch`.
const std::byte* ColumnAs(const ColumnTable& table, int c, DType dtype,
                          std::vector<std::byte>& scratch, const std::string& context) {
  const FieldSpec& column = table.fields[c];
  const std::byte* data = table.data[c].data();
  if (column.dtype == dtype) return data;
  const int64_t per_row = column.ElementsPerSample();
  const int64_t count = per_row * table.rows;
  scratch.resize(static_cast<size_t>(count) * DTypeSize(dtype));
  const int64_t bad = ConvertElements(column.dtype, data, dtype, scratch.data(), count);
  if (bad >= 0) {
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: row {}, column '{}': {} as {}: {}", context,
                    bad / std::max<int64_t>(per_row, 1), column.name, DTypeName(column.dtype),
                    DTypeName(dtype),
                    RefusalReason(column.dtype, data + bad * DTypeSize(column.dtype), dtype)));
  }
  return scratch.data();
}

}  // namespace

ColumnTable SelectFields(ColumnTable table, const DatabaseOptions& options,
                         const std::string& context) {
  if (options.select.empty()) return table;
  const StackPlan plan = PlanStack(Schema{table.fields}, options.select, context, options.key);
  ColumnTable out;
  out.rows = table.rows;
  for (const auto& f : plan.fields) {
    std::vector<std::vector<std::byte>> scratch(f.columns.size());
    std::vector<const std::byte*> parts;
    for (size_t i = 0; i < f.columns.size(); ++i) {
      parts.push_back(ColumnAs(table, f.columns[i], f.spec.dtype, scratch[i], context));
    }
    const FieldSpec& first = table.fields[f.columns.front()];
    const size_t part_bytes =
        static_cast<size_t>(first.ElementsPerSample()) * DTypeSize(f.spec.dtype);
    std::vector<std::byte> data(static_cast<size_t>(table.rows) * f.spec.SampleBytes());
    InterleaveColumns(parts, part_bytes, table.rows, data.data());
    out.fields.push_back(f.spec);
    out.data.push_back(std::move(data));
  }
  return out;
}

std::string ShortQuery(const std::string& query, size_t max_chars) {
  std::string out;
  bool space = false;
  for (char c : query) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

}  // namespace gpufeed
