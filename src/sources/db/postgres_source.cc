// OpenPostgres: describe the query, then stream it with binary COPY -- over one connection,
// or over several, each one key range, all reading one exported snapshot so the ranges add
// up to one consistent table.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/text.h"
#include "core/thread_pool.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "sources/db/postgres_connection.h"
#include "sources/db/postgres_copy.h"
#include "sources/db/table.h"

namespace gpufeed {
namespace {

std::string StripQuery(std::string query) {
  while (!query.empty() &&
         (std::isspace(static_cast<unsigned char>(query.back())) || query.back() == ';')) {
    query.pop_back();
  }
  return query;
}

std::string BuildQuery(const DatabaseOptions& options, const PgConnection& conn) {
  if (!options.query.empty() && !options.table.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: give a query or a table, not both", conn.target().description));
  }
  if (!options.query.empty()) {
    if (!options.columns.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: columns go with a table; a query selects its own",
                              conn.target().description));
    }
    return StripQuery(options.query);
  }
  if (options.table.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: no query and no table given", conn.target().description));
  }
  // "schema.table": each part quoted on its own.
  std::string table;
  size_t start = 0;
  while (true) {
    const size_t dot = options.table.find('.', start);
    if (!table.empty()) table += '.';
    table += conn.QuoteIdentifier(options.table.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  std::string columns;
  for (const auto& c : options.columns) {
    columns += (columns.empty() ? "" : ", ") + conn.QuoteIdentifier(c);
  }
  return fmt::format("SELECT {} FROM {}", columns.empty() ? "*" : columns, table);
}

std::map<uint32_t, std::string> TypeNames(PgConnection& conn, const std::set<uint32_t>& oids) {
  std::string list;
// g++ 12 warns -Wrestrict on `"literal" + std::string` inside libstdc++ (a false positive,
// GCC bug 105329); silenced for this line only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
  for (uint32_t oid : oids) list += (list.empty() ? "" : ",") + std::to_string(oid);
#pragma GCC diagnostic pop
  PgResult r = conn.Exec(
      fmt::format("SELECT oid::int8, format_type(oid, NULL) FROM pg_type WHERE oid IN ({})", list),
      PGRES_TUPLES_OK, "naming the column types");
  std::map<uint32_t, std::string> names;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    names[static_cast<uint32_t>(std::stoul(PQgetvalue(r.get(), i, 0)))] = PQgetvalue(r.get(), i, 1);
  }
  return names;
}

// Checks each declared field (DatabaseOptions::fields) against the column of its name (type,
// shape) and gives array columns their declared shape. `where` names the database.
void ApplyDeclaredFields(const DatabaseOptions& options, const std::string& where,
                         std::vector<PgColumn>& columns) {
  for (const FieldSpec& declared : options.fields) {
    auto it = std::find_if(columns.begin(), columns.end(),
                           [&](const PgColumn& c) { return c.name == declared.name; });
    if (it == columns.end()) {
      std::string all;
      for (const auto& c : columns) all += (all.empty() ? "" : ", ") + c.name;
      throw Error(ErrorCode::kNotFound,
                  fmt::format("{}: declared field '{}' is not a column of the query (columns: {})",
                              where, declared.name, all));
    }
    if (declared.dtype != it->dtype) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: declared field {} but column '{}' is {} ({}); cast it in the "
                      "query instead",
                      where, declared.ToString(), it->name, it->type_name, DTypeName(it->dtype)));
    }
    if (!it->is_array && !declared.shape.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: declared field {} has a shape but column '{}' is a scalar {}",
                              where, declared.ToString(), it->name, it->type_name));
    }
    bool positive = true;
    for (int64_t d : declared.shape) positive = positive && d > 0;
    std::string bad_shape = positive ? "" : "a dimension that is not positive";
    try {
      (void)declared.SampleBytes();
    } catch (const Error& e) {
      bad_shape = e.what();
    }
    if (!bad_shape.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: declared field {}: {}", where, declared.ToString(), bad_shape));
    }
    if (it->is_array) it->declared_shape = declared.shape;
  }
}

std::vector<PgColumn> DescribeColumns(PgConnection& conn, const std::string& query,
                                      const DatabaseOptions& options) {
  const std::string sql = fmt::format("SELECT * FROM ({}) AS gpufeed_q", query);
  PgResult prepared(PQprepare(conn.get(), "", sql.c_str(), 0, nullptr));
  if (prepared == nullptr || PQresultStatus(prepared.get()) != PGRES_COMMAND_OK) {
    conn.ThrowResultError(prepared.get(), fmt::format("the query {}", ShortQuery(query)));
  }
  PgResult described(PQdescribePrepared(conn.get(), ""));
  if (described == nullptr || PQresultStatus(described.get()) != PGRES_COMMAND_OK) {
    conn.ThrowResultError(described.get(), fmt::format("the query {}", ShortQuery(query)));
  }
  const int count = PQnfields(described.get());
  std::set<uint32_t> oids;
  for (int i = 0; i < count; ++i) oids.insert(PQftype(described.get(), i));
  const auto names = TypeNames(conn, oids);
  std::vector<PgColumn> columns;
  std::set<std::string> seen;
  for (int i = 0; i < count; ++i) {
    PgColumn column;
    column.name = PQfname(described.get(), i);
    column.type_oid = PQftype(described.get(), i);
    const auto name = names.find(column.type_oid);
    column.type_name = name != names.end() ? name->second : fmt::format("oid {}", column.type_oid);
    const auto dtype = PgTypeToDType(column.type_oid, &column.is_array, &column.element_oid);
    if (!dtype) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}: column '{}' has type {}, which gpufeed does not read; it "
                              "reads boolean, smallint, integer, bigint, real, double precision "
                              "and arrays of them (cast it in the query, e.g. {}::real)",
                              conn.target().description, ShortQuery(query), column.name,
                              column.type_name, column.name));
    }
    column.dtype = *dtype;
    if (!seen.insert(column.name).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: {}: two columns are named '{}'; name them apart with AS",
                              conn.target().description, ShortQuery(query), column.name));
    }
    columns.push_back(std::move(column));
  }
  if (columns.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {}: the query has no columns", conn.target().description,
                            ShortQuery(query)));
  }
  ApplyDeclaredFields(options, conn.target().description, columns);
  return columns;
}

struct KeyRange {
  int64_t first = 0;
  int64_t last = 0;  // inclusive, so INT64_MAX needs no overflow
};

std::vector<KeyRange> SplitKeyRange(int64_t lo, int64_t hi, int parts) {
  const __int128 span = static_cast<__int128>(hi) - lo + 1;
  const __int128 width = (span + parts - 1) / parts;
  std::vector<KeyRange> ranges;
  for (__int128 start = lo; start <= hi; start += width) {
    const __int128 last = std::min<__int128>(start + width - 1, hi);
    ranges.push_back({static_cast<int64_t>(start), static_cast<int64_t>(last)});
  }
  return ranges;
}

std::string CopySql(const std::string& select) {
  return fmt::format("COPY ({}) TO STDOUT (FORMAT binary)", select);
}

void PutBigEndian16(std::string& out, int16_t v) {
  const uint16_t be = __builtin_bswap16(static_cast<uint16_t>(v));
  out.append(reinterpret_cast<const char*>(&be), 2);
}
void PutBigEndian32(std::string& out, int32_t v) {
  const uint32_t be = __builtin_bswap32(static_cast<uint32_t>(v));
  out.append(reinterpret_cast<const char*>(&be), 4);
}

// The rows of `select` through a binary cursor, FETCHed in blocks: for servers and proxies
// that refuse COPY. Each row's cells are in the same binary send format as COPY's fields, so
// they are framed as COPY tuples and go through the same parser and its checks.
ColumnTable CursorRows(PgConnection& conn, const std::string& select,
                       const std::vector<PgColumn>& columns, const std::string& context,
                       const std::string& row_suffix, const std::atomic<bool>& stop) {
  const bool own_transaction = PQtransactionStatus(conn.get()) == PQTRANS_IDLE;
  if (own_transaction) conn.Exec("BEGIN READ ONLY", PGRES_COMMAND_OK, "BEGIN");
  conn.Exec(fmt::format("DECLARE gpufeed_cursor BINARY NO SCROLL CURSOR FOR {}", select),
            PGRES_COMMAND_OK, context);
  PgCopyParser parser(columns, context, row_suffix);
  std::string framed("PGCOPY\n\377\r\n\0", 11);
  PutBigEndian32(framed, 0);  // flags
  PutBigEndian32(framed, 0);  // header extension
  parser.Feed(framed.data(), framed.size());
  const int count = static_cast<int>(columns.size());
  while (true) {
    PgResult block =
        conn.Exec("FETCH 8192 FROM gpufeed_cursor", PGRES_TUPLES_OK,
                  fmt::format("{} (after {} rows{})", context, parser.rows(), row_suffix));
    const int rows = PQntuples(block.get());
    if (rows == 0) break;
    if (PQnfields(block.get()) != count) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the cursor returned {} columns, expected {}", context,
                              PQnfields(block.get()), count));
    }
    for (int r = 0; r < rows; ++r) {
      framed.clear();
      PutBigEndian16(framed, static_cast<int16_t>(count));
      for (int c = 0; c < count; ++c) {
        if (PQgetisnull(block.get(), r, c)) {
          PutBigEndian32(framed, -1);
          continue;
        }
        const int length = PQgetlength(block.get(), r, c);
        PutBigEndian32(framed, length);
        framed.append(PQgetvalue(block.get(), r, c), static_cast<size_t>(length));
      }
      parser.Feed(framed.data(), framed.size());
    }
    if (stop.load(std::memory_order_relaxed)) {
      throw Error(ErrorCode::kCancelled, fmt::format("{}: another connection failed", context));
    }
  }
  framed.clear();
  PutBigEndian16(framed, -1);
  parser.Feed(framed.data(), framed.size());
  parser.Finish();
  conn.Exec("CLOSE gpufeed_cursor", PGRES_COMMAND_OK, "CLOSE");
  if (own_transaction) conn.Exec("COMMIT", PGRES_COMMAND_OK, "COMMIT");
  return parser.Take();
}

// The rows of `select` over binary COPY; with `cursor`, or when the server refuses COPY
// (feature not supported) outside a transaction, through CursorRows.
ColumnTable LoadRows(PgConnection& conn, const std::string& select, bool cursor,
                     const std::vector<PgColumn>& columns, const std::string& context,
                     const std::string& row_suffix, const std::atomic<bool>& stop) {
  if (cursor) return CursorRows(conn, select, columns, context, row_suffix, stop);
  const std::string copy_sql = CopySql(select);
  PgResult started(PQexec(conn.get(), copy_sql.c_str()));
  if (started == nullptr || PQresultStatus(started.get()) != PGRES_COPY_OUT) {
    const char* state =
        started == nullptr ? nullptr : PQresultErrorField(started.get(), PG_DIAG_SQLSTATE);
    if (state != nullptr && std::string_view(state) == "0A000" &&
        PQtransactionStatus(conn.get()) == PQTRANS_IDLE) {
      return CursorRows(conn, select, columns, context, row_suffix, stop);
    }
    conn.ThrowResultError(started.get(), context);
  }
  started.reset();
  PgCopyParser parser(columns, context, row_suffix);
  while (true) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn.get(), &buffer, 0);
    if (n > 0) {
      try {
        parser.Feed(buffer, static_cast<size_t>(n));
      } catch (...) {
        PQfreemem(buffer);
        throw;
      }
      PQfreemem(buffer);
      if (stop.load(std::memory_order_relaxed)) {
        throw Error(ErrorCode::kCancelled, fmt::format("{}: another connection failed", context));
      }
      continue;
    }
    if (n == -2) {
      conn.ThrowResultError(
          nullptr, fmt::format("{} (after {} rows{})", context, parser.rows(), row_suffix));
    }
    break;  // -1: the COPY is over; its result says how it ended
  }
  // An error raised by a later row (division by zero) or a terminated backend ends the COPY
  // with an error result here, after the rows before it arrived: they are thrown away.
  bool failed = false;
  PgResult failure;
  while (PgResult r{PQgetResult(conn.get())}) {
    if (!failed && PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      failed = true;
      failure = std::move(r);
    }
  }
  if (failed || PQstatus(conn.get()) != CONNECTION_OK) {
    conn.ThrowResultError(failure.get(),
                          fmt::format("{} (after {} rows{})", context, parser.rows(), row_suffix));
  }
  parser.Finish();
  return parser.Take();
}

// The rows of `query` between each range's bounds of `key`, one connection per range, all on
// the snapshot `snapshot`; the first failure stops the others and is rethrown.
struct KeyRangeLoad {
  const PgTarget& target;
  const DatabaseOptions& options;
  const std::string& query;
  const std::string& quoted_key;
  const std::string& snapshot;
  const std::vector<PgColumn>& columns;
  const std::string& context;
};

std::vector<ColumnTable> LoadKeyRanges(const KeyRangeLoad& in, const std::vector<KeyRange>& ranges,
                                       const std::vector<std::string>& suffixes) {
  std::vector<ColumnTable> parts(ranges.size());
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto load = [&](size_t i) {
    try {
      PgConnection worker(in.target);
      worker.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", PGRES_COMMAND_OK, "BEGIN");
      worker.Exec(fmt::format("SET TRANSACTION SNAPSHOT '{}'", in.snapshot), PGRES_COMMAND_OK,
                  "SET TRANSACTION SNAPSHOT");
      const std::string select =
          fmt::format("SELECT * FROM ({}) AS gpufeed_q WHERE {} BETWEEN {} AND {} ORDER BY {}",
                      in.query, in.quoted_key, ranges[i].first, ranges[i].last, in.quoted_key);
      parts[i] =
          LoadRows(worker, select, in.options.cursor, in.columns, in.context, suffixes[i], stop);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      // The first failure is the cause; the others were stopped because of it.
      if (!first_error) first_error = std::current_exception();
      stop.store(true, std::memory_order_relaxed);
    }
  };
  {
    // One connection per range, all at once: each COPY waits on the server, not on a CPU.
    ThreadPool pool(static_cast<int>(ranges.size()));
    pool.ParallelFor(static_cast<int64_t>(ranges.size()),
                     [&](int64_t i, int) { load(static_cast<size_t>(i)); });
  }
  if (first_error) std::rethrow_exception(first_error);
  return parts;
}

// The parts in key order as one table; every part's array shapes must agree.
ColumnTable ConcatParts(std::vector<ColumnTable> parts, const std::vector<PgColumn>& columns,
                        const std::string& context, const std::vector<std::string>& suffixes) {
  ColumnTable table;
  size_t shaped = parts.size();  // the first part with rows: it set the array shapes
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].rows == 0) continue;
    if (shaped == parts.size()) {
      shaped = i;
      table = std::move(parts[i]);
      continue;
    }
    for (size_t f = 0; f < table.fields.size(); ++f) {
      if (parts[i].fields[f] != table.fields[f]) {
        throw Error(
            ErrorCode::kCorruptData,
            fmt::format("{}: column '{}' ({}): a ragged array: {} in the rows{} and {} in "
                        "the rows{}; every row needs the same shape",
                        context, columns[f].name, columns[f].type_name, table.fields[f].ToString(),
                        suffixes[shaped], parts[i].fields[f].ToString(), suffixes[i]));
      }
    }
    table.Append(std::move(parts[i]));
  }
  return table;
}

void CheckOptions(const PgTarget& target, const DatabaseOptions& options) {
  if (options.connections < 0 || options.connections > 64) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: connections = {}; expected 0 (auto) to 64", target.description,
                            options.connections));
  }
  if (options.key.empty() && options.connections > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} connections need a key column to split the rows by",
                            target.description, options.connections));
  }
}

void CheckKeyColumn(const std::vector<PgColumn>& columns, const std::string& key_name,
                    const std::string& context) {
  const auto key = std::find_if(columns.begin(), columns.end(),
                                [&](const PgColumn& c) { return c.name == key_name; });
  if (key == columns.end() || key->is_array ||
      (key->dtype != DType::kInt16 && key->dtype != DType::kInt32 && key->dtype != DType::kInt64)) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: key '{}' must be an integer column of the query{}", context, key_name,
                    key == columns.end() ? " (it has no such column)"
                                         : fmt::format(" (it is {})", key->type_name)));
  }
}

// min and max of the key over the query, or nullopt when it has no rows.
std::optional<std::pair<int64_t, int64_t>> KeyBounds(PgConnection& conn, const std::string& query,
                                                     const std::string& quoted_key,
                                                     const std::string& key_name,
                                                     const std::string& context) {
  PgResult bounds = conn.Exec(
      fmt::format("SELECT min({0})::int8, max({0})::int8 FROM ({1}) AS gpufeed_q", quoted_key,
                  query),
      PGRES_TUPLES_OK, fmt::format("{}: the range of key '{}'", ShortQuery(query), key_name));
  if (PQgetisnull(bounds.get(), 0, 0)) return std::nullopt;
  const auto bound = [&](int column) {
    const std::optional<int64_t> value = ParseNumber<int64_t>(PQgetvalue(bounds.get(), 0, column));
    if (!value) {
      throw Error(
          ErrorCode::kCorruptData,
          fmt::format("{}: the server's {} of key '{}' is not an int8: '{}'", context,
                      column == 0 ? "min" : "max", key_name, PQgetvalue(bounds.get(), 0, column)));
    }
    return *value;
  };
  return std::make_pair(bound(0), bound(1));
}

}  // namespace

std::shared_ptr<Source> OpenPostgres(const std::string& conninfo, DatabaseOptions options) {
  PgTarget target = PgTarget::Parse(conninfo);
  CheckOptions(target, options);
  PgConnection conn(target);
  // The server's own view of where we are, for messages and the cache key (no password).
  target.description =
      fmt::format("postgresql host={} port={} dbname={} user={}", PQhost(conn.get()),
                  PQport(conn.get()), PQdb(conn.get()), PQuser(conn.get()));
  const std::string query = BuildQuery(options, conn);
  const std::string context = fmt::format("{}: {}", target.description, ShortQuery(query));
  const std::string identity = fmt::format("{}|{}", target.description, query);
  std::vector<PgColumn> columns = DescribeColumns(conn, query, options);

  if (options.key.empty()) {
    std::atomic<bool> stop{false};
    ColumnTable table = LoadRows(conn, query, options.cursor, columns, context, "", stop);
    return NewDatabaseSource(std::move(table), context, identity);
  }

  CheckKeyColumn(columns, options.key, context);
  const std::string quoted_key = conn.QuoteIdentifier(options.key);
  // Every connection reads the snapshot this transaction exports, so the key ranges are
  // slices of one table even while others write to it.
  conn.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", PGRES_COMMAND_OK, "BEGIN");
  PgResult snap = conn.Exec("SELECT pg_export_snapshot()", PGRES_TUPLES_OK, "export snapshot");
  const std::string snapshot = PQgetvalue(snap.get(), 0, 0);
  const auto bounds = KeyBounds(conn, query, quoted_key, options.key, context);
  if (!bounds) return NewDatabaseSource(ColumnTable{}, context, identity);  // no rows: says so
  const auto ranges = SplitKeyRange(bounds->first, bounds->second,
                                    options.connections > 0 ? options.connections : 4);
  std::vector<std::string> suffixes(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    suffixes[i] = fmt::format(" of the rows with {} in [{}, {}]", options.key, ranges[i].first,
                              ranges[i].last);
  }
  const KeyRangeLoad in{target, options, query, quoted_key, snapshot, columns, context};
  ColumnTable table = ConcatParts(LoadKeyRanges(in, ranges, suffixes), columns, context, suffixes);
  conn.Exec("COMMIT", PGRES_COMMAND_OK, "COMMIT");
  return NewDatabaseSource(std::move(table), context, identity);
}

}  // namespace gpufeed
