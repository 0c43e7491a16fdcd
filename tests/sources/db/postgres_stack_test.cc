// PostgreSQL columns stacked into one field (DatabaseOptions::select), the key left out of
// the fields, and the checks a field's dtype makes where it narrows, against the private
// server (pg_server.h).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <numeric>

#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "sources/db/pg_server.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::PgServer;

constexpr int kRows = 900;
constexpr int kColumns = 35;

// Rows of `sql` as text, one vector per row; fails the test on error.
std::vector<std::vector<std::string>> Query(const std::string& sql) {
  PGconn* conn = PQconnectdb(PgServer().conninfo.c_str());
  EXPECT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
  PGresult* r = PQexec(conn, sql.c_str());
  const auto status = PQresultStatus(r);
  EXPECT_TRUE(status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) << PQerrorMessage(conn);
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; status == PGRES_TUPLES_OK && i < PQntuples(r); ++i) {
    rows.emplace_back();
    for (int j = 0; j < PQnfields(r); ++j) rows.back().emplace_back(PQgetvalue(r, i, j));
  }
  PQclear(r);
  PQfinish(conn);
  return rows;
}

std::string Features() {
  std::string list;
  for (int k = 0; k < kColumns; ++k) list += fmt::format("{}f{}", k ? ", " : "", k);
  return list;
}

class PostgresStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUFEED_REQUIRE_PG_SERVER();
    static bool created = false;
    if (created) return;
    // An id key, 35 real features, a float8 and an int8 column; rows stored shuffled.
    std::string columns;
    for (int k = 0; k < kColumns; ++k) {
      columns += fmt::format(", (g * 0.37 + {} * 1.01)::real AS f{}", k, k);
    }
    Query(fmt::format(R"(
        SET client_min_messages = warning;
        DROP TABLE IF EXISTS wide;
        CREATE TABLE wide AS SELECT g::int8 AS id{}, (g * 0.1)::float8 AS d, (g % 7)::int8 AS label
        FROM generate_series(0, {}) g ORDER BY md5(g::text);)",
                      columns, kRows - 1));
    created = true;
  }
  const std::string& conninfo() const { return PgServer().conninfo; }

  // The reference: SELECT f0, ..., f34 FROM wide ORDER BY id, as the server prints it (real's
  // text output is the shortest that reads back exactly).
  static std::vector<float> Reference() {
    std::vector<float> out;
    for (const auto& row : Query(fmt::format("SELECT {} FROM wide ORDER BY id", Features()))) {
      for (const auto& v : row) out.push_back(std::strtof(v.c_str(), nullptr));
    }
    return out;
  }

  static std::vector<float> ReadX(const Source& source) {
    std::vector<int64_t> rows(source.size());
    std::iota(rows.begin(), rows.end(), 0);
    const Schema& schema = source.schema();
    std::vector<std::vector<std::byte>> buffers(schema.fields.size());
    BatchView view{.fields = {}, .rows = source.size()};
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      buffers[f].resize(source.size() * schema.fields[f].SampleBytes());
      view.fields.push_back(buffers[f].data());
    }
    source.Read(rows, view, nullptr);
    const auto& x = buffers[schema.IndexOf("x")];
    std::vector<float> out(x.size() / sizeof(float));
    std::memcpy(out.data(), x.data(), x.size());
    return out;
  }
};

TEST_F(PostgresStackTest, ThirtyFiveRealColumnsAreOneFloat32FieldEqualToTheOrderedQuery) {
  const std::vector<float> reference = Reference();
  ASSERT_EQ(reference.size(), size_t{kRows} * kColumns);
  // Key ranges over three connections, and one connection with the key only ordering.
  for (int connections : {3, 1}) {
    const auto source =
        OpenPostgres(conninfo(), {.table = "wide",
                                  .select = {{.name = "x", .columns = {"f*"}},
                                             {.name = "y", .columns = {"label"}, .stack = false}},
                                  .key = "id",
                                  .connections = connections});
    EXPECT_EQ(source->schema().ToString(), "x: float32[35], y: int64[]");
    EXPECT_EQ(ReadX(*source), reference) << connections << " connections";
  }
  // The same by a list of names, from a query, through the loader at batch 256.
  std::vector<std::string> names;
  for (int k = 0; k < kColumns; ++k) names.push_back(fmt::format("f{}", k));
  const auto listed = OpenPostgres(
      conninfo(),
      {.query = "SELECT * FROM wide", .select = {{.name = "x", .columns = names}}, .key = "id"});
  EXPECT_EQ(listed->schema().ToString(), "x: float32[35]");
  Loader loader(listed, {.batch_size = 256, .shuffle = false, .workers = 2});
  std::vector<float> delivered;
  while (auto batch = loader.Next()) {
    const auto x = batch->field("x").as<float>();
    delivered.insert(delivered.end(), x, x + batch->size() * kColumns);
  }
  EXPECT_EQ(delivered, reference);
}

TEST_F(PostgresStackTest, TheKeyIsNoFieldUnlessNamed) {
  const auto source = OpenPostgres(conninfo(), {.table = "wide", .key = "id", .connections = 2});
  EXPECT_EQ(source->schema().IndexOf("id"), -1);
  EXPECT_EQ(source->schema().fields.size(), kColumns + 2u);  // f0..f34, d, label
  const auto named = OpenPostgres(
      conninfo(), {.table = "wide", .columns = {"id", "label"}, .key = "id", .connections = 2});
  EXPECT_EQ(named->schema().ToString(), "id: int64[], label: int64[]");
  // Columns without the key still split by it.
  const auto unnamed = OpenPostgres(
      conninfo(), {.table = "wide", .columns = {"label"}, .key = "id", .connections = 2});
  EXPECT_EQ(unnamed->schema().ToString(), "label: int64[]");
  EXPECT_EQ(unnamed->size(), kRows);
}

TEST_F(PostgresStackTest, NarrowingRefusesValuesOutOfRangeNamingColumnAndRow) {
  // float8 -> float32 rounds ordinary values ...
  const auto narrow = OpenPostgres(
      conninfo(),
      {.query = "SELECT id, d FROM wide",
       .select = {{.name = "d", .columns = {"d"}, .stack = false, .dtype = DType::kFloat32}},
       .key = "id"});
  float d[3];
  narrow->Read(std::vector<int64_t>{0, 1, 2},
               {.fields = {reinterpret_cast<std::byte*>(d)}, .rows = 3}, nullptr);
  EXPECT_EQ(d[1], 0.1f);
  EXPECT_EQ(d[2], static_cast<float>(0.2));
  // ... and refuses one beyond float32's range, naming the row (in key order) and column.
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(),
                               {.query = "SELECT id, CASE WHEN id = 17 THEN 1e300 ELSE d END AS d "
                                         "FROM wide",
                                .select = {{.name = "d",
                                            .columns = {"d"},
                                            .stack = false,
                                            .dtype = DType::kFloat32}},
                                .key = "id",
                                .connections = 3});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 17"), HasSubstr("column 'd'"),
                             HasSubstr("beyond float32's range")));
  // int8 -> int16: any value out of range is refused.
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(),
                               {.query = "SELECT id, CASE WHEN id = 5 THEN 40000 ELSE label END "
                                         "AS label FROM wide",
                                .select = {{.name = "y",
                                            .columns = {"label"},
                                            .stack = false,
                                            .dtype = DType::kInt16}},
                                .key = "id"});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 5"), HasSubstr("column 'label'"),
                             HasSubstr("40000 does not fit int16")));
}

TEST_F(PostgresStackTest, OnlyTheColumnsTheFieldsTakeAreRead) {
  // A text column the select does not take is never loaded, so never refused.
  const auto source =
      OpenPostgres(conninfo(), {.query = "SELECT id, 'name'::text AS name, f0, f1 FROM wide",
                                .select = {{.name = "x", .columns = {"f?"}}},
                                .key = "id"});
  EXPECT_EQ(source->schema().ToString(), "x: float32[2]");
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(), {.query = "SELECT id, 'name'::text AS name FROM wide",
                                            .select = {{.name = "x", .columns = {"name"}}}});
                },
                &message),
            ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("column 'name' has type text"));
}

}  // namespace
}  // namespace gpufeed
