// The rows a database query returned, one contiguous array per column, and the Source that
// serves them from memory.
//
// Thread-safety: a ColumnTable is built by one thread; once handed to NewDatabaseSource it is
// read-only and the Source is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/database.h"
#include "gpufeed/schema.h"
#include "gpufeed/source.h"
#include "gpufeed/stack.h"

namespace gpufeed {

struct ColumnTable {
  std::vector<FieldSpec> fields;
  // data[f] holds rows * fields[f].SampleBytes() bytes, C order; for a variable-length field
  // (a BLOB declared `x:uint8[*]`) every row's items end to end, and offsets[f] the rows + 1
  // offsets into them, in items (empty for a fixed field).
  std::vector<std::vector<std::byte>> data;
  std::vector<std::vector<int64_t>> offsets;
  int64_t rows = 0;

  // Appends the rows of `other`, whose fields must equal these (REQUIRES).
  void Append(ColumnTable&& other);
};

// `what` describes the origin for Describe() ("postgresql host=db dbname=train: SELECT ...",
// no password), `identity` is what the data came from for a cache key; a hash of the loaded
// bytes is added to it, so a table that changed gets another key. A table with a
// variable-length field is served as values plus offsets (NewNamedRaggedSource). Throws
// Error(kInvalidArgument) for a table without rows, naming `what`.
std::shared_ptr<Source> NewDatabaseSource(ColumnTable table, std::string what,
                                          std::string identity);

// The columns of a query (`names`, in query order) that a load reads: those `options.select`
// takes, or without a select every column but `options.key` (unless `options.columns` names
// it). Throws as PlanStack for a select that does not match the columns, naming `context`.
std::vector<std::string> ColumnsToLoad(const std::vector<std::string>& names,
                                       const DatabaseOptions& options, const std::string& context);

// The fields `options.select` makes of the loaded columns: converted where a dtype asks (a
// refused value throws Error(kCorruptData) naming the row and column) and stacked, each
// row's columns side by side. Without a select, `table` as it is.
ColumnTable SelectFields(ColumnTable table, const DatabaseOptions& options,
                         const std::string& context);

// Shortens a query for messages: whitespace runs become one space, and past `max_chars` it is
// cut with "...".
std::string ShortQuery(const std::string& query, size_t max_chars = 120);

}  // namespace gpufeed
