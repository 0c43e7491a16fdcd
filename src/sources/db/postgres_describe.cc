#include "sources/db/postgres_describe.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "gpufeed/error.h"
#include "sources/db/table.h"

namespace gpufeed {
namespace {

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

}  // namespace

std::vector<PgColumn> DescribeQuery(PgConnection& conn, const std::string& query) {
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
    column.supported = dtype.has_value();
    if (dtype) column.dtype = *dtype;
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
  return columns;
}

namespace {

// Checks `declared` against its column and sets the column's declared shape.
void ApplyDeclared(const FieldSpec& declared, PgColumn& column, const std::string& context) {
  if (declared.dtype != column.dtype) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: declared field {} but column '{}' is {} ({}); cast it in the "
                            "query or give the select field a dtype instead",
                            context, declared.ToString(), column.name, column.type_name,
                            DTypeName(column.dtype)));
  }
  if (!column.is_array && !declared.shape.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: declared field {} has a shape but column '{}' is a scalar {}",
                            context, declared.ToString(), column.name, column.type_name));
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
                fmt::format("{}: declared field {}: {}", context, declared.ToString(), bad_shape));
  }
  if (column.is_array) column.declared_shape = declared.shape;
}

}  // namespace

std::vector<PgColumn> LoadedColumns(const std::vector<PgColumn>& all,
                                    const std::vector<std::string>& load,
                                    const DatabaseOptions& options, const std::string& context) {
  std::vector<PgColumn> columns;
  for (const std::string& name : load) {
    const auto it =
        std::find_if(all.begin(), all.end(), [&](const PgColumn& c) { return c.name == name; });
    GPUFEED_ASSERT(it != all.end(), "a loaded column the query does not have");
    if (!it->supported) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: column '{}' has type {}, which gpufeed does not read; it "
                              "reads boolean, smallint, integer, bigint, real, double precision "
                              "and arrays of them (cast it in the query, e.g. {}::real)",
                              context, it->name, it->type_name, it->name));
    }
    columns.push_back(*it);
  }
  for (const FieldSpec& declared : options.fields) {
    auto it = std::find_if(columns.begin(), columns.end(),
                           [&](const PgColumn& c) { return c.name == declared.name; });
    if (it == columns.end()) {
      std::string names;
      for (const auto& c : columns) names += (names.empty() ? "" : ", ") + c.name;
      throw Error(ErrorCode::kNotFound,
                  fmt::format("{}: declared field '{}' is not a column the load reads "
                              "(columns: {})",
                              context, declared.name, names));
    }
    ApplyDeclared(declared, *it, context);
  }
  return columns;
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

}  // namespace gpufeed
