#include "sources/database_table.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <functional>
#include <string_view>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// Rows served from the loaded arrays, as OpenMemory serves caller arrays: memory has no
// locality to win by sorting, so rows are copied in the order asked.
class DatabaseSource final : public Source {
 public:
  DatabaseSource(ColumnTable table, std::string what, std::string identity)
      : table_(std::move(table)), what_(std::move(what)), identity_(std::move(identity)) {
    schema_.fields = table_.fields;
    for (const auto& f : table_.fields) row_bytes_.push_back(f.SampleBytes());
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return table_.rows; }
  std::string Describe() const override {
    return fmt::format("{} ({} fields, {} samples)", what_, table_.fields.size(), table_.rows);
  }
  std::string Identity() const override { return identity_; }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState*) const override {
    CheckReadRequest(*this, indices, out);
    for (size_t f = 0; f < row_bytes_.size(); ++f) {
      const size_t rb = row_bytes_[f];
      const std::byte* src = table_.data[f].data();
      std::byte* dst = out.fields[f];
      for (size_t i = 0; i < indices.size(); ++i) {
        std::memcpy(dst + i * rb, src + static_cast<size_t>(indices[i]) * rb, rb);
      }
    }
  }

 private:
  const ColumnTable table_;
  const std::string what_;
  const std::string identity_;
  Schema schema_;
  std::vector<size_t> row_bytes_;
};

}  // namespace

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
  return std::make_shared<DatabaseSource>(std::move(table), std::move(what), std::move(identity));
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
