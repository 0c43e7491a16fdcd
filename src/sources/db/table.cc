#include "sources/db/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <string_view>

#include "gpufeed/error.h"
#include "sources/memory_source.h"
#include "sources/stack/plan.h"

namespace gpufeed {

void ColumnTable::Append(ColumnTable&& other) {
  GPUFEED_ASSERT(other.fields == fields, "appending a table with other fields");
  for (size_t f = 0; f < data.size(); ++f) {
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
  for (size_t f = 0; f < table.fields.size(); ++f) {
    GPUFEED_ASSERT(
        table.data[f].size() == static_cast<size_t>(table.rows) * table.fields[f].SampleBytes(),
        "column size differs from rows * sample bytes");
  }
  // std::hash of a string_view is stable within one build of libstdc++, which is what
  // processes sharing a cache run; the byte count rides along for safety.
  uint64_t hash = 0;
  for (const auto& column : table.data) {
    const std::string_view bytes(reinterpret_cast<const char*>(column.data()), column.size());
    hash = hash * 0x9E3779B97F4A7C15ULL ^ std::hash<std::string_view>{}(bytes);
  }
  Schema schema{table.fields};
  identity =
      fmt::format("{}|{}|rows={}|content={:016x}", identity, schema.ToString(), table.rows, hash);
  // The loaded table is a memory source's arrays, owned by the source.
  auto owned = std::make_shared<const ColumnTable>(std::move(table));
  std::vector<MemoryField> fields;
  for (size_t f = 0; f < owned->fields.size(); ++f) {
    fields.push_back(
        {.spec = owned->fields[f], .data = owned->data[f].data(), .samples = owned->rows});
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
