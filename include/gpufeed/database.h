// Database sources: a PostgreSQL or SQLite table or query, loaded once, in bulk, into one
// contiguous array per column, then served from memory like OpenMemory -- an epoch costs a
// memcpy per row, not a query per batch, and the caches (OpenCached) can share the loaded
// copy across processes.
//
//   auto source = gpufeed::OpenPostgres("host=db dbname=train",
//                                       {.table = "samples", .columns = {"x", "label"},
//                                        .key = "id", .connections = 4});
//   auto source = gpufeed::OpenSqlite("train.db", {.query = "SELECT x, label FROM t",
//                                                  .fields = {{"x", DType::kFloat32, {7, 5}}}});
//
// Columns become fields of the same name, or, with `select`, fields made of columns: several
// columns of one dtype stacked into one field (`x: float32[35]` from 35 `real` columns, by
// name or glob pattern), stacked once at load so an epoch copies one row per sample
// (gpufeed/stack.h says how, and how a field's dtype converts and what it refuses):
//
//   auto source = gpufeed::OpenSqlite("train.db",
//       {.table = "samples", .key = "id",
//        .select = {{.name = "x", .columns = {"f*"}, .dtype = DType::kFloat32},
//                   {.name = "y", .columns = {"label"}, .stack = false}}});
//
// The `key` column orders the rows and is not a field unless `columns` or `select` names it.
//
// Types. PostgreSQL: bool, int2, int4, int8, float4, float8 and arrays of them (any number
// of dimensions, the same dimensions in every row) become bool, int16, int32, int64,
// float32, float64 fields, the array dimensions their shape; other types are refused when
// loaded (cast them in the query). SQLite: INTEGER -> int64, REAL -> float64 (SQLite stores
// every REAL in 8 bytes: ask for float32 with a select dtype or a declared field); a BLOB
// column holds the raw bytes of a fixed-shape array and needs its dtype and shape declared
// in `fields`; TEXT is refused.
//
// A load either completes or throws: a NULL, a ragged array, an unsupported column type, a
// query error or a connection lost mid-load raises Error naming the row and column, and no
// source is returned. Passwords (from the connection string, PGPASSWORD or ~/.pgpass, which
// libpq reads itself) never appear in a message, Describe() or Identity().
//
// Thread-safety: the Open functions may be called from any thread; the returned Source is
// thread-safe (read-only memory after the load).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpufeed/schema.h"
#include "gpufeed/source.h"
#include "gpufeed/stack.h"

namespace gpufeed {

struct DatabaseOptions {
  // The rows to load: a SELECT (or VALUES) statement. Default: empty = built from `table`
  // and `columns`. Exactly one of `query` and `table` is given.
  std::string query = {};
  std::string table = {};                 // Default: empty. Quoted as an identifier.
  std::vector<std::string> columns = {};  // Default: empty = every column of `table`
  // Declared fields by column name, for columns whose type does not say it all: a SQLite
  // BLOB column's dtype and shape (required), a SQLite REAL column read as float32 or an
  // INTEGER column as a narrower integer (checked as gpufeed/stack.h says), a PostgreSQL
  // array reshaped (same element count; its dtype must match the column's). Default: none.
  std::vector<FieldSpec> fields = {};
  // The fields to make, in this order, each from one column or several stacked (see
  // gpufeed/stack.h; patterns match in the query's column order and never match `key`).
  // Only the columns they take are loaded. Default: empty = every column its own field.
  std::vector<StackedField> select = {};
  // An integer column of the query the rows are ordered by; not a field unless `columns` or
  // `select` names it. PostgreSQL splits the load by it: `connections` connections each COPY
  // one key range. Default: empty = rows in the query's order (PostgreSQL: one connection).
  std::string key = {};
  int connections = 0;  // Default: 0 = 4 when `key` is given, else 1. SQLite: 0 or 1.
  // PostgreSQL only. Default: false = binary COPY (a server that refuses COPY with "feature
  // not supported" gets the cursor anyway, on one connection). True: a binary server-side
  // cursor FETCHed in blocks, for poolers and servers where COPY cannot be used.
  bool cursor = false;
};

// Loads `options.query` (or the table) from the PostgreSQL server named by `conninfo` (a
// libpq connection string, "host=... dbname=..." or "postgresql://user@host/db"; unset
// parts come from the PG* environment variables and ~/.pgpass) with binary COPY.
// Throws Error: kIo for a server that cannot be reached or a connection lost mid-load,
// kInvalidArgument for rejected credentials or a bad query, kNotFound for a missing table
// or column, kCorruptData for NULLs, ragged arrays and values a declared field or a select
// dtype cannot hold (naming the row and column), kUnsupported for column types that do not
// map to a dtype.
std::shared_ptr<Source> OpenPostgres(const std::string& conninfo, DatabaseOptions options);

// Loads from the SQLite file at `path`, opened read-only. Errors as for OpenPostgres, and
// kNotFound for a missing file.
std::shared_ptr<Source> OpenSqlite(const std::string& path, DatabaseOptions options);

// True when `uri` names a database: it starts with "sqlite:", "postgresql:" or "postgres:".
bool IsDatabaseUri(const std::string& uri);

// Opens a database named by a URI, the spelling of the CLI:
//   sqlite:///abs/path.db?query=SELECT x, label FROM t     (sqlite:rel/path.db also works)
//   postgresql://user@host:5432/db?table=samples&key=id&connections=4
//   postgresql:///db?host=/run/pg&query=SELECT%20x%20FROM%20t&fields=x:float32[7,5]
//   sqlite:///abs/train.db?table=samples&key=id&select=x:float32=f*;y=label
// gpufeed's parameters -- query, table, columns (comma-separated), key, connections, cursor
// (0/1), fields (ParseSchema's spelling), select (FIELD[:DTYPE]=COLUMNS separated by ';',
// COLUMNS one column as is, or a pattern or comma-separated list stacked) -- are taken out
// of the URI (values %-decoded) and
// override `options`; every other part goes to libpq unchanged. Throws Error(kInvalidArgument) for
// a URI that is neither, or a bad parameter; otherwise as OpenPostgres / OpenSqlite.
std::shared_ptr<Source> OpenDatabase(const std::string& uri, DatabaseOptions options = {});

}  // namespace gpufeed
