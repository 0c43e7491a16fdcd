// SQLite columns stacked into one field (DatabaseOptions::select), the key left out of the
// fields, and the checks a field's dtype makes where it narrows.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr int kRows = 700;
constexpr int kColumns = 35;

void Exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
}

std::string FeatureList() {
  std::string list;
  for (int k = 0; k < kColumns; ++k) list += fmt::format("{}f{}", k ? ", " : "", k);
  return list;
}

// A table of an id key, 35 REAL features (doubles that float32 rounds) and a label, its
// rows stored in a shuffled order, so "ordered by the key" is something the load must do.
class SqliteStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = scratch_.Path("wide.db");
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    std::string columns;
    for (int k = 0; k < kColumns; ++k) columns += fmt::format(", f{} REAL", k);
    Exec(db, fmt::format("CREATE TABLE wide (id INTEGER{}, label INTEGER)", columns));
    Exec(db, "BEGIN");
    std::vector<int64_t> ids(kRows);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    for (int64_t id : ids) {
      std::string values = std::to_string(id);
      for (int k = 0; k < kColumns; ++k) values += fmt::format(", {:.17g}", Value(id, k));
      Exec(db, fmt::format("INSERT INTO wide VALUES ({}, {})", values, id % 7));
    }
    Exec(db, "COMMIT");
    sqlite3_close(db);
  }

  static double Value(int64_t id, int k) { return id * 0.1 + k * 1.01; }

  // The reference: `SELECT f0, ..., f34 FROM wide ORDER BY id` through SQLite itself, each
  // value as the float32 nearest it.
  std::vector<float> Reference() const {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    const std::string sql = fmt::format("SELECT {} FROM wide ORDER BY id", FeatureList());
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK);
    std::vector<float> out;
    while (sqlite3_step(s) == SQLITE_ROW) {
      for (int k = 0; k < kColumns; ++k)
        out.push_back(static_cast<float>(sqlite3_column_double(s, k)));
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
  }

  // Every row of field `field` (float32[35]) of `source`, in source order.
  static std::vector<float> ReadAll(const Source& source, int field) {
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
    std::vector<float> out(source.size() * kColumns);
    std::memcpy(out.data(), buffers[field].data(), out.size() * sizeof(float));
    return out;
  }

  testing::ScratchDir scratch_;
  std::string path_;
};

StackedField X(std::vector<std::string> columns) {
  return {.name = "x", .columns = std::move(columns), .dtype = DType::kFloat32};
}

TEST_F(SqliteStackTest, ThirtyFiveRealColumnsAreOneFloat32FieldEqualToTheOrderedQuery) {
  const auto source =
      OpenSqlite(path_, {.table = "wide",
                         .select = {X({"f*"}), {.name = "y", .columns = {"label"}, .stack = false}},
                         .key = "id"});
  EXPECT_EQ(source->schema().ToString(), "x: float32[35], y: int64[]");
  ASSERT_EQ(source->size(), kRows);
  const std::vector<float> reference = Reference();
  EXPECT_EQ(ReadAll(*source, 0), reference);
  // The pattern matches in table order (f1, f10, f11, ... would be name order).
  std::vector<std::string> names;
  for (int k = 0; k < kColumns; ++k) names.push_back(fmt::format("f{}", k));
  const auto listed = OpenSqlite(path_, {.table = "wide", .select = {X(names)}, .key = "id"});
  EXPECT_EQ(ReadAll(*listed, 0), reference);

  // Through the loader, batches of 256 in a shuffled order: row r of a batch is the reference
  // row of the label it carries... checked by the whole row.
  Loader loader(source, {.batch_size = 256, .shuffle = true, .seed = 5, .workers = 2});
  int64_t seen = 0;
  while (auto batch = loader.Next()) {
    const auto x = batch->field("x").as<float>();
    for (int64_t r = 0; r < batch->size(); ++r) {
      const int64_t id = static_cast<int64_t>(std::lround((x[r * kColumns] - 0.0f) / 0.1f));
      ASSERT_GE(id, 0);
      ASSERT_LT(id, kRows);
      for (int k = 0; k < kColumns; ++k) {
        ASSERT_EQ(x[r * kColumns + k], reference[id * kColumns + k]) << "id " << id;
      }
      ASSERT_EQ(batch->field("y").as<int64_t>()[r], id % 7);
      ++seen;
    }
  }
  EXPECT_EQ(seen, kRows);
}

TEST_F(SqliteStackTest, TheUriSpellsASelect) {
  const auto source = OpenDatabase(
      fmt::format("sqlite://{}?table=wide&key=id&select=x:float32=f*;y=label;z=f1,f0", path_));
  EXPECT_EQ(source->schema().ToString(), "x: float32[35], y: int64[], z: float64[2]");
  EXPECT_EQ(ReadAll(*source, 0), Reference());
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenDatabase(fmt::format("sqlite://{}?table=wide&select=x", path_)); },
                  &message),
      ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("expected FIELD[:DTYPE]=COLUMNS"));
  EXPECT_EQ(
      ErrorCodeOf(
          [&] { OpenDatabase(fmt::format("sqlite://{}?table=wide&select=x:float33=f*", path_)); },
          &message),
      ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("unknown dtype 'float33'"));
}

TEST_F(SqliteStackTest, TheKeyIsNoFieldUnlessNamed) {
  const auto source = OpenSqlite(path_, {.table = "wide", .key = "id"});
  EXPECT_EQ(source->schema().fields.size(), kColumns + 1u);
  EXPECT_EQ(source->schema().IndexOf("id"), -1);
  EXPECT_EQ(source->schema().fields.front().name, "f0");
  // Named in columns or in select, it is a field; a pattern never takes it.
  const auto by_columns =
      OpenSqlite(path_, {.table = "wide", .columns = {"id", "label"}, .key = "id"});
  EXPECT_EQ(by_columns->schema().ToString(), "id: int64[], label: int64[]");
  const auto by_select =
      OpenSqlite(path_, {.table = "wide",
                         .select = {{.name = "key", .columns = {"id"}, .stack = false}, X({"*"})},
                         .key = "id"});
  EXPECT_EQ(by_select->schema().ToString(), "key: int64[], x: float32[36]");  // f*, label
  int64_t first = -1;
  std::vector<float> x(36);
  by_select->Read(
      std::vector<int64_t>{0},
      {.fields = {reinterpret_cast<std::byte*>(&first), reinterpret_cast<std::byte*>(x.data())},
       .rows = 1},
      nullptr);
  EXPECT_EQ(first, 0);  // ordered by the key
  // Without a key every column is a field, as the query returns it.
  EXPECT_EQ(OpenSqlite(path_, {.table = "wide"})->schema().fields.size(), kColumns + 2u);
}

TEST_F(SqliteStackTest, NarrowingRefusesValuesOutOfRangeNamingColumnAndRow) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  Exec(db, "UPDATE wide SET f7 = 1e39 WHERE id = 12");
  Exec(db, "UPDATE wide SET label = 300 WHERE id = 40");
  Exec(db, "UPDATE wide SET f3 = 9e999 WHERE id = 2");  // +inf stays inf: not refused
  sqlite3_close(db);
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenSqlite(path_, {.table = "wide", .select = {X({"f*"})}, .key = "id"}); },
                  &message),
      ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 12"), HasSubstr("column 'f7'"),
                             HasSubstr("beyond float32's range")));
  // float64 keeps it; float32 of the other columns holds the infinity.
  const auto wide = OpenSqlite(
      path_, {.table = "wide",
              .select = {{.name = "x", .columns = {"f0", "f3"}, .dtype = DType::kFloat32}},
              .key = "id"});
  float row2[2];
  wide->Read(std::vector<int64_t>{2}, {.fields = {reinterpret_cast<std::byte*>(row2)}, .rows = 1},
             nullptr);
  EXPECT_TRUE(std::isinf(row2[1]));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenSqlite(path_, {.table = "wide",
                                     .select = {{.name = "y",
                                                 .columns = {"label"},
                                                 .stack = false,
                                                 .dtype = DType::kInt8}},
                                     .key = "id"});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 40"), HasSubstr("column 'label'"),
                             HasSubstr("300 does not fit int8")));
  // A declared float32 column is checked the same way.
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenSqlite(path_, {.query = "SELECT f7 FROM wide ORDER BY id",
                                     .fields = {{"f7", DType::kFloat32, {}}}});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 12"), HasSubstr("column 'f7'"),
                             HasSubstr("beyond float32's range")));
}

TEST_F(SqliteStackTest, SelectsThatDoNotFitTheColumnsAreRefused) {
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenSqlite(path_, {.table = "wide", .select = {X({"g*"})}}); }, &message),
      ErrorCode::kNotFound);
  EXPECT_THAT(message, AllOf(HasSubstr("pattern 'g*' matches no column"), HasSubstr("f34")));
  // REAL and INTEGER columns do not stack without a dtype to convert them to.
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenSqlite(path_, {.table = "wide",
                                     .select = {{.name = "x", .columns = {"f0", "label"}}}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("different dtypes"));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenSqlite(path_, {.table = "wide",
                                     .select = {{.name = "y", .columns = {"f*"}, .stack = false}}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("exactly one column"));
  EXPECT_EQ(ErrorCodeOf([&] { OpenSqlite(path_, {.table = "wide", .key = "nope"}); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("key 'nope' is not a column"));
}

}  // namespace
}  // namespace gpufeed
