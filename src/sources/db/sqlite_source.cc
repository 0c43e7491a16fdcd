// OpenSqlite: one pass of sqlite3_step over the query, each column appended to its array.
// SQLite types values per row, not per column, so every row is checked against the type
// the column's first row (or its declaration) set.
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "sources/db/local_copy.h"
#include "sources/db/table.h"
#include "sources/stack/plan.h"

namespace gpufeed {
namespace {

struct SqliteCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StatementFinalizer {
  void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
};

enum class Storage { kInteger, kReal, kBlob };

std::string_view StorageName(int type) {
  switch (type) {
    case SQLITE_INTEGER:
      return "INTEGER";
    case SQLITE_FLOAT:
      return "REAL";
    case SQLITE_TEXT:
      return "TEXT";
    case SQLITE_BLOB:
      return "BLOB";
    default:
      return "NULL";
  }
}

struct SqliteColumn {
  FieldSpec spec;
  bool declared = false;
  bool typed = false;  // storage known (declared, or set by the first row)
  Storage storage = Storage::kInteger;
};

// `value` (of dtype `from`) into `out` as the column's dtype; empty, or why it is refused.
std::string StoreAs(DType from, const void* value, DType to, std::byte* out) {
  const auto* bytes = static_cast<const std::byte*>(value);
  if (ConvertElements(from, bytes, to, out, 1) < 0) return {};
  return RefusalReason(from, bytes, to);
}

std::string QuoteName(const std::string& name) {
  std::string q = "\"";
  for (char ch : name) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

class SqliteLoader {
 public:
  SqliteLoader(const std::string& path, const DatabaseOptions& options) : path_(path) {
    if (options.connections > 1) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("sqlite {}: connections is a PostgreSQL option; a SQLite file is "
                              "read in one pass",
                              path));
    }
    std::string file = path;
    if (IsRemoteUri(path)) {  // SQLite opens files by path: it reads a local copy
      copy_ = std::make_unique<LocalCopy>(path);
      file = copy_->path();
    }
    if (!std::filesystem::exists(file)) {
      throw Error(ErrorCode::kNotFound, fmt::format("sqlite {}: no such file", path));
    }
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    db_.reset(db);
    if (rc != SQLITE_OK) {
      throw Error(ErrorCode::kIo,
                  fmt::format("sqlite {}: cannot open: {}", path,
                              db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    }
    query_ = BuildQuery(options);
    context_ = fmt::format("sqlite {}: {}", path_, ShortQuery(query_));
    Prepare();
    Project(options);
    DescribeColumns(options.fields);
  }

  std::shared_ptr<Source> Load() {
    ColumnTable table;
    for (const auto& c : columns_) {
      table.fields.push_back(c.spec);
      table.data.emplace_back();
    }
    int rc;
    while ((rc = sqlite3_step(statement_.get())) == SQLITE_ROW) {
      for (size_t c = 0; c < columns_.size(); ++c) StoreValue(c, table);
      ++table.rows;
      row_ = table.rows;
    }
    if (rc != SQLITE_DONE) {
      ThrowDbError(fmt::format("row {}", table.rows));
    }
    for (size_t c = 0; c < columns_.size(); ++c) table.fields[c] = columns_[c].spec;
    table = SelectFields(std::move(table), options_, context_);
    return NewDatabaseSource(std::move(table), context_,
                             fmt::format("sqlite|{}|{}", FileIdentity(), query_));
  }

 private:
  void Prepare() {
    sqlite3_stmt* statement = nullptr;
    statement_.reset();
    if (sqlite3_prepare_v2(db_.get(), query_.c_str(), static_cast<int>(query_.size()), &statement,
                           nullptr) != SQLITE_OK) {
      ThrowDbError("the query");
    }
    statement_.reset(statement);
    if (statement == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: the query is empty", context_));
    }
  }

  // Narrows the query to the columns the load reads, ordered by the key: a subquery, so the
  // key orders the rows without being a field.
  void Project(const DatabaseOptions& options) {
    options_ = options;
    std::vector<std::string> names;
    for (int i = 0; i < sqlite3_column_count(statement_.get()); ++i) {
      names.emplace_back(sqlite3_column_name(statement_.get(), i));
    }
    if (!options.key.empty() && std::find(names.begin(), names.end(), options.key) == names.end()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: key '{}' is not a column of the query", context_, options.key));
    }
    const std::vector<std::string> load = ColumnsToLoad(names, options, context_);
    if (load == names && options.key.empty()) return;
    std::string list;
    for (const auto& c : load) list += (list.empty() ? "" : ", ") + QuoteName(c);
    std::string inner = query_;
    while (!inner.empty() &&
           (std::isspace(static_cast<unsigned char>(inner.back())) || inner.back() == ';')) {
      inner.pop_back();
    }
    query_ = fmt::format("SELECT {} FROM ({}) AS gpufeed_q{}", list, inner,
                         options.key.empty() ? "" : " ORDER BY " + QuoteName(options.key));
    Prepare();
  }

  std::string BuildQuery(const DatabaseOptions& options) const {
    if (!options.query.empty() && !options.table.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("sqlite {}: give a query or a table, not both", path_));
    }
    if (!options.query.empty()) {
      if (!options.columns.empty()) {
        throw Error(
            ErrorCode::kInvalidArgument,
            fmt::format("sqlite {}: columns go with a table; a query selects its own", path_));
      }
      return options.query;
    }
    if (options.table.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("sqlite {}: no query and no table given", path_));
    }
    std::vector<std::string> names = options.columns;
    // The rows are ordered by the key, so the query selects it even when it is no field.
    if (!names.empty() && !options.key.empty() &&
        std::find(names.begin(), names.end(), options.key) == names.end()) {
      names.push_back(options.key);
    }
    std::string columns;
    for (const auto& c : names) columns += (columns.empty() ? "" : ", ") + QuoteName(c);
    return fmt::format("SELECT {} FROM {}", columns.empty() ? "*" : columns,
                       QuoteName(options.table));
  }

  // "/abs/path:size:mtime_ns", the spelling cache garbage collection checks for staleness.
  std::string FileIdentity() const {
    const std::string absolute = std::filesystem::absolute(path_).string();
    struct stat st {};
    if (stat(absolute.c_str(), &st) != 0) return absolute;
    return fmt::format("{}:{}:{}", absolute, st.st_size,
                       int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec);
  }

  [[noreturn]] void ThrowDbError(const std::string& where) const {
    const int code = sqlite3_errcode(db_.get());
    const std::string why = sqlite3_errmsg(db_.get());
    ErrorCode ours = ErrorCode::kInvalidArgument;
    if (why.starts_with("no such table") || why.starts_with("no such column")) {
      ours = ErrorCode::kNotFound;
    } else if (code == SQLITE_IOERR || code == SQLITE_BUSY || code == SQLITE_LOCKED) {
      ours = ErrorCode::kIo;
    } else if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) {
      ours = ErrorCode::kCorruptData;
    }
    throw Error(ours, fmt::format("{}: {}: {}", context_, where, why));
  }

  void DescribeColumns(const std::vector<FieldSpec>& declared) {
    sqlite3_stmt* s = statement_.get();
    const int count = sqlite3_column_count(s);
    if (count == 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: the statement returns no columns", context_));
    }
    std::set<std::string> seen;
    for (int i = 0; i < count; ++i) {
      SqliteColumn column;
      column.spec.name = sqlite3_column_name(s, i);
      if (!seen.insert(column.spec.name).second) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: two columns are named '{}'; name them apart with AS", context_,
                                column.spec.name));
      }
      columns_.push_back(std::move(column));
    }
    for (const FieldSpec& field : declared) {
      auto it = std::find_if(columns_.begin(), columns_.end(),
                             [&](const SqliteColumn& c) { return c.spec.name == field.name; });
      if (it == columns_.end()) {
        std::string all;
        for (const auto& c : columns_) all += (all.empty() ? "" : ", ") + c.spec.name;
        throw Error(ErrorCode::kNotFound,
                    fmt::format("{}: declared field '{}' is not a column of the query "
                                "(columns: {})",
                                context_, field.name, all));
      }
      if (field.dtype == DType::kFloat16 || field.dtype == DType::kBFloat16) {
        if (field.shape.empty()) {
          throw Error(ErrorCode::kUnsupported,
                      fmt::format("{}: declared field {}: half-precision scalars are not read; "
                                  "store them as REAL",
                                  context_, field.ToString()));
        }
      }
      it->spec = field;
      it->declared = true;
    }
  }

  [[noreturn]] void Fail(size_t c, const std::string& what) const {
    throw Error(ErrorCode::kCorruptData, fmt::format("{}: row {}, column '{}': {}", context_, row_,
                                                     columns_[c].spec.name, what));
  }

  // Sets the column's storage from its declaration or its first value.
  void Type(size_t c, int type) {
    SqliteColumn& column = columns_[c];
    if (column.typed) return;
    column.typed = true;
    const bool array = column.declared && !column.spec.shape.empty();
    if (array || type == SQLITE_BLOB) {
      if (!column.declared) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: column '{}' holds BLOBs: declare its dtype and shape "
                                "(fields {}:float32[7,5] for a 7x5 float32 array per row, or "
                                "{}:uint8[*] for each row's bytes)",
                                context_, column.spec.name, column.spec.name, column.spec.name));
      }
      column.storage = Storage::kBlob;
    } else if (type == SQLITE_TEXT) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: column '{}' holds TEXT (row {}), which gpufeed does not read; "
                              "it reads INTEGER, REAL and BLOBs of a declared dtype and shape",
                              context_, column.spec.name, row_));
    } else if (type == SQLITE_FLOAT || (column.declared && IsFloating(column.spec.dtype))) {
      column.storage = Storage::kReal;
      if (!column.declared) column.spec.dtype = DType::kFloat64;
      if (column.spec.dtype != DType::kFloat32 && column.spec.dtype != DType::kFloat64) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: declared field {}: a REAL column reads as float32 or float64",
                                context_, column.spec.ToString()));
      }
    } else {
      column.storage = Storage::kInteger;
      if (!column.declared) column.spec.dtype = DType::kInt64;
    }
  }

  void StoreValue(size_t c, ColumnTable& table) {
    sqlite3_stmt* s = statement_.get();
    const int i = static_cast<int>(c);
    const int type = sqlite3_column_type(s, i);
    if (type == SQLITE_NULL) {
      Fail(c, fmt::format("NULL; every row needs a value (filter with WHERE {} IS NOT NULL or "
                          "replace it with COALESCE)",
                          columns_[c].spec.name));
    }
    Type(c, type);
    SqliteColumn& column = columns_[c];
    table.fields[c] = column.spec;
    auto& out = table.data[c];
    if (column.spec.variable()) return StoreItems(c, type, table);
    const size_t size = column.spec.SampleBytes();
    const size_t base = out.size();
    switch (column.storage) {
      case Storage::kBlob: {
        if (type != SQLITE_BLOB) {
          Fail(c, fmt::format("a {} value in a BLOB column", StorageName(type)));
        }
        const int bytes = sqlite3_column_bytes(s, i);
        if (static_cast<size_t>(bytes) != size) {
          Fail(c, fmt::format("a ragged array: a BLOB of {} bytes; the declared {} needs {}", bytes,
                              column.spec.ToString(), size));
        }
        out.resize(base + size);
        if (size > 0) std::memcpy(out.data() + base, sqlite3_column_blob(s, i), size);
        break;
      }
      case Storage::kReal: {
        if (type != SQLITE_FLOAT && type != SQLITE_INTEGER) {
          Fail(c, fmt::format("a {} value in a REAL column", StorageName(type)));
        }
        const double v = sqlite3_column_double(s, i);
        out.resize(base + size);
        const std::string refused = StoreAs(DType::kFloat64, &v, column.spec.dtype, &out[base]);
        if (!refused.empty())
          Fail(c, fmt::format("{} (declared {})", refused, column.spec.ToString()));
        break;
      }
      case Storage::kInteger: {
        if (type != SQLITE_INTEGER) {
          Fail(c, fmt::format("a {} value in an INTEGER column (its first row is an integer); "
                              "CAST it in the query",
                              StorageName(type)));
        }
        const int64_t v = sqlite3_column_int64(s, i);
        out.resize(base + size);
        const std::string refused = StoreAs(DType::kInt64, &v, column.spec.dtype, &out[base]);
        if (!refused.empty())
          Fail(c, fmt::format("{} (declared {})", refused, column.spec.ToString()));
        break;
      }
    }
  }

  // A BLOB of a column declared variable-length (`x:uint8[*]`): its bytes, whole items of the
  // declared dtype and item shape, appended to the column's values, and its end as an offset.
  void StoreItems(size_t c, int type, ColumnTable& table) {
    if (type != SQLITE_BLOB) Fail(c, fmt::format("a {} value in a BLOB column", StorageName(type)));
    const FieldSpec& spec = columns_[c].spec;
    const size_t item = spec.ItemBytes();
    const auto bytes =
        static_cast<size_t>(sqlite3_column_bytes(statement_.get(), static_cast<int>(c)));
    if (item == 0 || bytes % item != 0) {
      Fail(c, fmt::format("a BLOB of {} bytes is not a whole number of {}-byte items of {}", bytes,
                          item, spec.ToString()));
    }
    table.offsets.resize(table.fields.size());
    auto& offsets = table.offsets[c];
    if (offsets.empty()) offsets.push_back(0);
    auto& out = table.data[c];
    const size_t base = out.size();
    out.resize(base + bytes);
    if (bytes > 0) {
      std::memcpy(out.data() + base, sqlite3_column_blob(statement_.get(), static_cast<int>(c)),
                  bytes);
    }
    offsets.push_back(offsets.back() + static_cast<int64_t>(bytes / item));
  }

  const std::string path_;
  std::unique_ptr<LocalCopy> copy_;  // a remote file's local copy, removed after the load
  std::unique_ptr<sqlite3, SqliteCloser> db_;
  std::unique_ptr<sqlite3_stmt, StatementFinalizer> statement_;
  std::string query_;
  std::string context_;
  std::vector<SqliteColumn> columns_;
  DatabaseOptions options_;  // the select (and key) the loaded columns go through
  int64_t row_ = 0;
};

}  // namespace

std::shared_ptr<Source> OpenSqlite(const std::string& path, DatabaseOptions options) {
  return SqliteLoader(path, options).Load();
}

}  // namespace gpufeed
