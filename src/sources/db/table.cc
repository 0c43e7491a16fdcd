#include "sources/db/table.h"

#include <fmt/format.h>

#include <cctype>
#include <functional>
#include <string_view>

#include "gpufeed/error.h"
#include "sources/memory_source.h"

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
