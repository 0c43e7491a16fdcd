// The SQLite source on files made by the test.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "gpufeed/cache.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "sources/every_row_once.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr int kRows = 500;

float Feature(int64_t id, int k) { return static_cast<float>(id) * 0.5f + static_cast<float>(k); }

void Exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
}

class SqliteSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = scratch_.Path("train.db");
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    Exec(db, "CREATE TABLE t (id INTEGER PRIMARY KEY, x REAL, v BLOB, label INTEGER, name TEXT)");
    Exec(db, "BEGIN");
    sqlite3_stmt* insert = nullptr;
    ASSERT_EQ(
        sqlite3_prepare_v2(db, "INSERT INTO t VALUES (?, ?, ?, ?, 'n')", -1, &insert, nullptr),
        SQLITE_OK);
    for (int64_t id = 0; id < kRows; ++id) {
      float v[35];
      for (int k = 0; k < 35; ++k) v[k] = Feature(id, k);
      sqlite3_bind_int64(insert, 1, id);
      sqlite3_bind_double(insert, 2, static_cast<double>(id) * 0.25);
      sqlite3_bind_blob(insert, 3, v, sizeof(v), SQLITE_TRANSIENT);
      sqlite3_bind_int64(insert, 4, id % 10);
      ASSERT_EQ(sqlite3_step(insert), SQLITE_DONE);
      sqlite3_reset(insert);
    }
    sqlite3_finalize(insert);
    Exec(db, "COMMIT");
    sqlite3_close(db);
  }

  std::shared_ptr<Source> Open(const std::string& query, std::vector<FieldSpec> fields = {}) {
    return OpenSqlite(path_, {.query = query, .fields = std::move(fields)});
  }

  testing::ScratchDir scratch_;
  std::string path_;
};

TEST_F(SqliteSourceTest, MapsIntegerRealAndDeclaredBlobColumns) {
  const auto source = Open("SELECT id, x, v, label FROM t ORDER BY id",
                           {{"v", DType::kFloat32, {7, 5}}, {"label", DType::kInt8, {}}});
  EXPECT_EQ(source->size(), kRows);
  EXPECT_EQ(source->schema().ToString(), (Schema{{{"id", DType::kInt64, {}},
                                                  {"x", DType::kFloat64, {}},
                                                  {"v", DType::kFloat32, {7, 5}},
                                                  {"label", DType::kInt8, {}}}})
                                             .ToString());
  const auto narrow = Open("SELECT x FROM t", {{"x", DType::kFloat32, {}}});
  EXPECT_EQ(narrow->schema().fields[0].dtype, DType::kFloat32);
  float x;
  narrow->Read(std::vector<int64_t>{3}, {.fields = {reinterpret_cast<std::byte*>(&x)}, .rows = 1},
               nullptr);
  EXPECT_EQ(x, 0.75f);
}

TEST_F(SqliteSourceTest, LoaderDeliversEveryRowOncePerEpochEqualToTheTable) {
  const auto source =
      OpenDatabase("sqlite:" + path_ + "?table=t&columns=id,v,label&fields=v:float32[35]");
  Loader loader(source, {.batch_size = 48, .shuffle = true, .seed = 3, .workers = 2});
  ExpectEveryRowOncePerEpoch(loader, kRows, 2, [](const Batch& batch, int64_t r, int64_t id) {
    ASSERT_EQ(batch.field("label").as<int64_t>()[r], id % 10);
    const auto v = batch.field("v").as<float>();
    for (int k = 0; k < 35; ++k) ASSERT_EQ(v[r * 35 + k], Feature(id, k));
  });
}

TEST_F(SqliteSourceTest, FeedsTheSharedMemoryCacheKeyedOnTheFileAndQuery) {
  testing::ScratchDir shm;
  const std::string query = "SELECT id, v FROM t ORDER BY id";
  const std::vector<FieldSpec> fields{{"v", DType::kFloat32, {35}}};
  CacheInfo first, second;
  const auto a = OpenCached(
      Open(query, fields),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &first);
  // A second load of the same file and query (another process, in practice) maps the copy
  // the first one published instead of building its own.
  const auto b = OpenCached(
      Open(query, fields),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &second);
  EXPECT_EQ(first.tier, CacheTier::kShm);
  EXPECT_TRUE(first.built);
  EXPECT_FALSE(second.built);
  EXPECT_EQ(first.key, second.key);
  std::vector<int64_t> rows{499, 0, 250};
  std::vector<int64_t> ids(3);
  std::vector<float> v(3 * 35);
  b->Read(
      rows,
      {.fields = {reinterpret_cast<std::byte*>(ids.data()), reinterpret_cast<std::byte*>(v.data())},
       .rows = 3},
      nullptr);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ids[i], rows[i]);
    EXPECT_EQ(v[i * 35 + 34], Feature(rows[i], 34));
  }
  // Another query is other data: another key.
  const auto c = OpenCached(
      Open("SELECT id, v FROM t WHERE id < 100 ORDER BY id", fields),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &second);
  EXPECT_NE(first.key, second.key);
}

TEST_F(SqliteSourceTest, UriSpellings) {
  EXPECT_TRUE(IsDatabaseUri("sqlite:x.db"));
  EXPECT_TRUE(IsDatabaseUri("postgres://h/db"));
  EXPECT_FALSE(IsDatabaseUri("/data/train.h5"));
  const auto a = OpenDatabase("sqlite://" + path_ + "?query=SELECT%20id%20FROM t WHERE id < 10");
  EXPECT_EQ(a->size(), 10);
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenDatabase("sqlite:" + path_ + "?query=SELECT id FROM t&bogus=1"); }),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { OpenDatabase("sqlite:" + path_ + "?query=%zz"); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { OpenDatabase("mysql://x"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenDatabase("sqlite:" + path_ + "?query=SELECT id FROM t&columns=id"); }),
      ErrorCode::kInvalidArgument);
}

TEST_F(SqliteSourceTest, NullsNameTheRowAndColumn) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  Open(
                      "SELECT id, CASE WHEN id = 42 THEN NULL ELSE label END AS y "
                      "FROM t ORDER BY id");
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 42"), HasSubstr("column 'y'"), HasSubstr("NULL")));
}

TEST_F(SqliteSourceTest, RaggedBlobsNameTheRowAndColumn) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  Open(
                      "SELECT id, CASE WHEN id = 9 THEN substr(v, 1, 8) ELSE v END AS v FROM t "
                      "ORDER BY id",
                      {{"v", DType::kFloat32, {7, 5}}});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 9"), HasSubstr("column 'v'"), HasSubstr("ragged"),
                             HasSubstr("8 bytes")));
  // A BLOB without a declared dtype and shape cannot be mapped.
  EXPECT_EQ(ErrorCodeOf([&] { Open("SELECT v FROM t"); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, AllOf(HasSubstr("column 'v'"), HasSubstr("declare")));
}

TEST_F(SqliteSourceTest, UnsupportedAndMismatchedValues) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { Open("SELECT id, name FROM t"); }, &message),
            ErrorCode::kUnsupported);
  EXPECT_THAT(message, AllOf(HasSubstr("column 'name'"), HasSubstr("TEXT")));
  EXPECT_EQ(
      ErrorCodeOf(
          [&] { Open("SELECT CASE WHEN id = 3 THEN 0.5 ELSE id END AS y FROM t ORDER BY id"); },
          &message),
      ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 3"), HasSubstr("REAL value in an INTEGER column")));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  Open("SELECT id * 100 AS big FROM t ORDER BY id", {{"big", DType::kInt8, {}}});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 2"), HasSubstr("200 does not fit")));
}

TEST_F(SqliteSourceTest, QueryErrorsAndMissingFiles) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { Open("SELEC id FROM t"); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, AllOf(HasSubstr("syntax error"), HasSubstr("SELEC id FROM t")));
  EXPECT_EQ(ErrorCodeOf([&] { Open("SELECT * FROM nope"); }), ErrorCode::kNotFound);
  EXPECT_EQ(ErrorCodeOf([&] { OpenSqlite(scratch_.Path("missing.db"), {.table = "t"}); }),
            ErrorCode::kNotFound);
  EXPECT_EQ(ErrorCodeOf([&] { Open("SELECT id FROM t WHERE id < 0"); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("no rows"));
}

TEST_F(SqliteSourceTest, ErrorInALaterRowServesNothing) {
  // abs() of the smallest int64 overflows: SQLite raises it at row 300, after 300 rows.
  std::string message;
  EXPECT_NE(
      ErrorCodeOf(
          [&] {
            Open(
                "SELECT abs(CASE WHEN id = 300 THEN -9223372036854775807 - 1 ELSE id END) AS a "
                "FROM t ORDER BY id");
          },
          &message),
      ErrorCode::kCancelled);
  EXPECT_THAT(message, AllOf(HasSubstr("row 300"), HasSubstr("integer overflow")));
}

TEST_F(SqliteSourceTest, OpensReadOnly) {
  std::string message;
  EXPECT_NE(ErrorCodeOf([&] { Open("DELETE FROM t WHERE id < 100 RETURNING id"); }, &message),
            ErrorCode::kCancelled);
  EXPECT_THAT(message, HasSubstr("readonly"));
  EXPECT_EQ(Open("SELECT id FROM t")->size(), kRows);
}

}  // namespace
}  // namespace gpufeed
