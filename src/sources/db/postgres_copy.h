// The PostgreSQL column types gpufeed maps to fields, and a parser of binary COPY output
// (`COPY (...) TO STDOUT (FORMAT binary)`) that appends each row to one array per column.
//
// Binary COPY (https://www.postgresql.org/docs/current/sql-copy.html): an 11-byte signature,
// an int32 flags word and an int32-sized header extension; then per tuple an int16 field
// count (-1 ends the data) and per field an int32 length (-1 = NULL) and the value in the
// type's binary send format, big-endian. An array value is int32 ndim, int32 has-nulls,
// int32 element type, per dimension int32 size and int32 lower bound, then per element an
// int32 length (-1 = NULL) and the element.
//
// Thread-safety: a PgCopyParser is used by one thread; PgColumn is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/dtype.h"
#include "gpufeed/schema.h"
#include "sources/db/table.h"

namespace gpufeed {

struct PgColumn {
  std::string name;
  uint32_t type_oid = 0;
  std::string type_name;  // "real[]", "integer"
  DType dtype = DType::kFloat32;
  bool supported = true;  // false: a type that maps to no dtype (only loaded ones must map)
  bool is_array = false;
  uint32_t element_oid = 0;  // for arrays
  // A declared shape (DatabaseOptions::fields): arrays are reshaped to it.
  std::optional<std::vector<int64_t>> declared_shape;
};

// The dtype of a scalar type oid (bool, int2, int4, int8, float4, float8), or of the element
// type of an array oid; sets *is_array and *element_oid. nullopt for any other type.
std::optional<DType> PgTypeToDType(uint32_t oid, bool* is_array, uint32_t* element_oid);

class PgCopyParser {
 public:
  // `context` prefixes every message ("postgresql host=... : SELECT ..."); `row_suffix`
  // follows each row number (" of the rows with id in [0, 100)"); `first_row` numbers the
  // first row this parser sees.
  PgCopyParser(const std::vector<PgColumn>& columns, std::string context, std::string row_suffix);

  // Parses the next bytes of the stream (any split). Throws Error(kCorruptData) for NULLs,
  // ragged arrays and malformed data, naming the row and column.
  void Feed(const char* data, size_t size);
  // REQUIRES: the stream ended. Throws Error(kIo) when the end-of-data marker never came.
  void Finish() const;
  // The rows parsed; array fields take their shape from the first row (or the declared one).
  ColumnTable Take();
  int64_t rows() const { return table_.rows; }

 private:
  // Bytes of `data` consumed by complete units (the header, whole tuples).
  size_t Parse(const char* data, size_t size);
  void DecodeTuple(const char* p, const char* end);
  void DecodeArray(size_t column, const char* p, int32_t length);
  [[noreturn]] void Fail(size_t column, const std::string& what) const;

  const std::vector<PgColumn>& columns_;
  const std::string context_;
  const std::string row_suffix_;
  ColumnTable table_;
  std::vector<bool> shape_known_;
  std::vector<std::vector<int64_t>> dims_;  // per array column: the first row's dimensions
  std::string pending_;
  bool header_done_ = false;
  bool ended_ = false;
};

}  // namespace gpufeed
