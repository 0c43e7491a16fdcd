// A SQLite BLOB column declared variable-length (`x:uint8[*]`): each row's bytes as one sample
// of a variable-length field, held as values plus offsets after the load.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>

#include "error_code_of.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/varlen.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;

// Row id's bytes: (id * 3) % 11 of them, byte k = id + k.
std::string RowBytes(int64_t id) {
  std::string bytes;
  for (int64_t k = 0; k < (id * 3) % 11; ++k) bytes.push_back(static_cast<char>(id + k));
  return bytes;
}

class SqliteBytesTest : public ::testing::Test {
 protected:
  // `rows` rows of (id, blob, label); the row `odd` holds `odd_value` (SQL) instead of its blob.
  void Make(int64_t rows, int64_t odd = -1, const std::string& odd_value = "") {
    path_ = scratch_.Path("bytes.db");
    std::remove(path_.c_str());
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB, label INTEGER)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    for (int64_t id = 0; id < rows; ++id) {
      sqlite3_stmt* insert = nullptr;
      const std::string value = id == odd ? odd_value : "?";
      ASSERT_EQ(
          sqlite3_prepare_v2(
              db, fmt::format("INSERT INTO t VALUES ({}, {}, {})", id, value, id * 10).c_str(), -1,
              &insert, nullptr),
          SQLITE_OK);
      const std::string bytes = RowBytes(id);
      if (id != odd)
        sqlite3_bind_blob(insert, 1, bytes.data(), static_cast<int>(bytes.size()),
                          SQLITE_TRANSIENT);
      ASSERT_EQ(sqlite3_step(insert), SQLITE_DONE);
      sqlite3_finalize(insert);
    }
    sqlite3_close(db);
  }

  testing::ScratchDir scratch_;
  std::string path_;
};

std::string Items(const Source& source, int field, int64_t index) {
  const int64_t indices[1] = {index};
  int64_t length = 0;
  source.ReadLengths(field, indices, {&length, 1}, nullptr);
  const size_t item = source.schema().fields[static_cast<size_t>(field)].ItemBytes();
  std::string out(static_cast<size_t>(length) * item, '\0');
  source.ReadItems(field, index, 0, std::as_writable_bytes(std::span(out)), nullptr);
  return out;
}

TEST_F(SqliteBytesTest, EachRowsBytesAreOneSampleBesideTheFixedColumns) {
  Make(40);
  auto source = OpenDatabase(fmt::format("sqlite://{}?table=t&key=id&fields=b:uint8[*]", path_));
  ASSERT_EQ(source->size(), 40);
  // The columns keep the table's order.
  ASSERT_EQ(source->schema().fields.size(), 2u);
  EXPECT_EQ(source->schema().fields[0], (FieldSpec{"b", DType::kUInt8, {kVariableDim}}));
  EXPECT_EQ(source->schema().fields[1].name, "label");
  for (int64_t id = 0; id < 40; ++id) EXPECT_EQ(Items(*source, 0, id), RowBytes(id)) << id;
  int64_t labels[2] = {};
  const int64_t indices[2] = {7, 3};
  source->Read(indices, {.fields = {nullptr, reinterpret_cast<std::byte*>(labels)}, .rows = 2},
               nullptr);
  EXPECT_EQ(labels[0], 70);
  EXPECT_EQ(labels[1], 30);
  EXPECT_TRUE(source->shareable_across_processes());
  EXPECT_THAT(source->Identity(), HasSubstr("content="));
  // Padded like any variable-length field.
  auto padded = PadSequences(source, {.max_length = 4});
  EXPECT_EQ(padded->schema().Field("b").shape, (std::vector<int64_t>{4}));
}

TEST_F(SqliteBytesTest, ItemsOfAWiderDTypeMustDivideTheBlob) {
  Make(12);
  auto source = OpenSqlite(path_, {.query = "SELECT b FROM t WHERE length(b) % 4 = 0",
                                   .fields = {{"b", DType::kInt32, {kVariableDim}}}});
  for (int64_t i = 0; i < source->size(); ++i) {
    EXPECT_EQ(Items(*source, 0, i).size() % 4, 0u);
  }
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenSqlite(path_, {.query = "SELECT b FROM t ORDER BY id",
                                     .fields = {{"b", DType::kInt32, {kVariableDim}}}});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("row 1, column 'b': a BLOB of 3 bytes is not a whole number"));
}

TEST_F(SqliteBytesTest, ANullOrAnotherTypeIsRefusedNamingTheRow) {
  for (const std::string& odd : {std::string("NULL"), std::string("42")}) {
    Make(10, 6, odd);
    std::string message;
    EXPECT_EQ(ErrorCodeOf(
                  [&] {
                    OpenSqlite(path_, {.query = "SELECT b FROM t ORDER BY id",
                                       .fields = {{"b", DType::kUInt8, {kVariableDim}}}});
                  },
                  &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, HasSubstr("row 6, column 'b'"));
  }
}

TEST_F(SqliteBytesTest, AnUndeclaredBlobSaysHowToReadItsBytes) {
  Make(3);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenSqlite(path_, {.query = "SELECT b FROM t"}); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("b:uint8[*]"));
}

}  // namespace
}  // namespace gpufeed
