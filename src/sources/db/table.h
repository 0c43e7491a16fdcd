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

#include "gpufeed/schema.h"
#include "gpufeed/source.h"

namespace gpufeed {

struct ColumnTable {
  std::vector<FieldSpec> fields;
  // data[f] holds rows * fields[f].SampleBytes() bytes, C order.
  std::vector<std::vector<std::byte>> data;
  int64_t rows = 0;

  // Appends the rows of `other`, whose fields must equal these (REQUIRES).
  void Append(ColumnTable&& other);
};

// `what` describes the origin for Describe() ("postgresql host=db dbname=train: SELECT ...",
// no password), `identity` is what the data came from for a cache key; a hash of the loaded
// bytes is added to it, so a table that changed gets another key. Throws
// Error(kInvalidArgument) for a table without rows, naming `what`.
std::shared_ptr<Source> NewDatabaseSource(ColumnTable table, std::string what,
                                          std::string identity);

// Shortens a query for messages: whitespace runs become one space, and past `max_chars` it is
// cut with "...".
std::string ShortQuery(const std::string& query, size_t max_chars = 120);

}  // namespace gpufeed
