// The binary COPY parser on streams built by hand, without a server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "gpufeed/error.h"
#include "sources/db/postgres_copy.h"
#include "sources/db/uri.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

void Put16(std::string& s, int16_t v) {
  const uint16_t be = __builtin_bswap16(static_cast<uint16_t>(v));
  s.append(reinterpret_cast<const char*>(&be), 2);
}
void Put32(std::string& s, int32_t v) {
  const uint32_t be = __builtin_bswap32(static_cast<uint32_t>(v));
  s.append(reinterpret_cast<const char*>(&be), 4);
}
void PutFloat(std::string& s, float f) {
  int32_t v;
  std::memcpy(&v, &f, 4);
  Put32(s, v);
}

std::string Header() {
  std::string s("PGCOPY\n\377\r\n\0", 11);
  Put32(s, 0);
  Put32(s, 0);
  return s;
}

// One tuple: an int4 and a real[] of `elements` (one dimension).
void PutRow(std::string& s, int32_t id, int elements, bool null_id = false) {
  Put16(s, 2);
  if (null_id) {
    Put32(s, -1);
  } else {
    Put32(s, 4);
    Put32(s, id);
  }
  Put32(s, 12 + 8 + elements * 8);
  Put32(s, 1);
  Put32(s, 0);
  Put32(s, 700);
  Put32(s, elements);
  Put32(s, 1);
  for (int e = 0; e < elements; ++e) {
    Put32(s, 4);
    PutFloat(s, static_cast<float>(id) + 0.25f * static_cast<float>(e));
  }
}

std::vector<PgColumn> Columns() {
  return {{.name = "id",
           .type_oid = 23,
           .type_name = "integer",
           .dtype = DType::kInt32,
           .declared_shape = std::nullopt},
          {.name = "v",
           .type_oid = 1021,
           .type_name = "real[]",
           .dtype = DType::kFloat32,
           .is_array = true,
           .element_oid = 700,
           .declared_shape = std::nullopt}};
}

TEST(PgCopyParserTest, ParsesTheSameTableWhateverTheSplit) {
  std::string stream = Header();
  for (int id = 0; id < 20; ++id) PutRow(stream, id * 3, 4);
  Put16(stream, -1);
  const auto columns = Columns();
  for (size_t step : {stream.size(), size_t{1}, size_t{7}, size_t{64}}) {
    PgCopyParser parser(columns, "test", "");
    for (size_t at = 0; at < stream.size(); at += step) {
      parser.Feed(stream.data() + at, std::min(step, stream.size() - at));
    }
    parser.Finish();
    ColumnTable table = parser.Take();
    ASSERT_EQ(table.rows, 20);
    EXPECT_EQ(table.fields[1].ToString(), "v: float32[4]");
    const auto* ids = reinterpret_cast<const int32_t*>(table.data[0].data());
    const auto* v = reinterpret_cast<const float*>(table.data[1].data());
    for (int r = 0; r < 20; ++r) {
      EXPECT_EQ(ids[r], r * 3);
      for (int e = 0; e < 4; ++e) EXPECT_EQ(v[r * 4 + e], r * 3 + 0.25f * e);
    }
  }
}

TEST(PgCopyParserTest, RejectsNullsRaggedRowsAndCutStreams) {
  const auto columns = Columns();
  std::string message;
  {
    std::string s = Header();
    PutRow(s, 1, 2);
    PutRow(s, 2, 2, /*null_id=*/true);
    PgCopyParser parser(columns, "test", "");
    EXPECT_EQ(ErrorCodeOf([&] { parser.Feed(s.data(), s.size()); }, &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, AllOf(HasSubstr("row 1"), HasSubstr("column 'id'"), HasSubstr("NULL")));
  }
  {
    std::string s = Header();
    PutRow(s, 1, 2);
    PutRow(s, 2, 3);
    PgCopyParser parser(columns, "test", " of part 2");
    EXPECT_EQ(ErrorCodeOf([&] { parser.Feed(s.data(), s.size()); }, &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, AllOf(HasSubstr("row 1 of part 2"), HasSubstr("ragged")));
  }
  {
    std::string s = Header();
    PutRow(s, 1, 2);
    PgCopyParser parser(columns, "test", "");
    parser.Feed(s.data(), s.size() - 3);  // cut inside the row, no end marker
    EXPECT_EQ(ErrorCodeOf([&] { parser.Finish(); }), ErrorCode::kIo);
  }
  {
    PgCopyParser parser(columns, "test", "");
    const std::string junk = "NOTCOPY-------------------";
    EXPECT_EQ(ErrorCodeOf([&] { parser.Feed(junk.data(), junk.size()); }), ErrorCode::kCorruptData);
  }
}

TEST(PgCopyParserTest, MapsOnlyNumericTypes) {
  bool is_array = false;
  uint32_t element = 0;
  EXPECT_EQ(PgTypeToDType(1022, &is_array, &element), DType::kFloat64);
  EXPECT_TRUE(is_array);
  EXPECT_EQ(element, 701u);
  EXPECT_EQ(PgTypeToDType(16, &is_array, &element), DType::kBool);
  EXPECT_FALSE(is_array);
  EXPECT_EQ(PgTypeToDType(25, &is_array, &element), std::nullopt);    // text
  EXPECT_EQ(PgTypeToDType(1700, &is_array, &element), std::nullopt);  // numeric
}

// One tuple holding one real[] value: `ndim` dimensions of `dims`, then `elements` elements
// actually present (a hostile stream says more than it holds).
std::string ArrayStream(const std::vector<int32_t>& dims, int elements) {
  std::string s = Header();
  Put16(s, 1);
  Put32(s, 12 + 8 * static_cast<int32_t>(dims.size()) + elements * 8);
  Put32(s, static_cast<int32_t>(dims.size()));
  Put32(s, 0);
  Put32(s, 700);
  for (int32_t d : dims) {
    Put32(s, d);
    Put32(s, 1);
  }
  for (int e = 0; e < elements; ++e) {
    Put32(s, 4);
    PutFloat(s, 1.0f);
  }
  Put16(s, -1);
  return s;
}

std::vector<PgColumn> ArrayColumn(std::optional<std::vector<int64_t>> declared = std::nullopt) {
  return {{.name = "v",
           .type_oid = 1021,
           .type_name = "real[]",
           .dtype = DType::kFloat32,
           .is_array = true,
           .element_oid = 700,
           .declared_shape = std::move(declared)}};
}

// Every array header is checked before anything is allocated.
TEST(PgCopyParserTest, HostileArrayHeadersAreCorruptDataBeforeAnyAllocation) {
  struct Case {
    std::vector<int32_t> dims;
    int elements;
    const char* says;
  };
  const Case cases[] = {
      // 73 bytes that ask for 2^31 x 2^31 x ... elements (64 GiB and more).
      {{65536, 65536}, 1, "truncated"},
      {{2147483647}, 0, "truncated"},
      // Negative dimensions (the schema would read float32[-1,-1]).
      {{-1, -1}, 0, "negative dimension -1"},
      {{-1}, 0, "negative dimension -1"},
      // A product that wraps to 0 in 64 bits: 2^16 six times is 2^96.
      {{65536, 65536, 65536, 65536, 65536, 65536}, 0, "too many elements"},
  };
  for (const Case& c : cases) {
    const auto columns = ArrayColumn();
    const std::string s = ArrayStream(c.dims, c.elements);
    PgCopyParser parser(columns, "pg-test", "");
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { parser.Feed(s.data(), s.size()); }, &message),
              ErrorCode::kCorruptData)
        << c.says;
    EXPECT_THAT(message, AllOf(HasSubstr("pg-test"), HasSubstr("column 'v'"), HasSubstr(c.says)));
  }
  // A declared shape: the same checks come first.
  const auto declared = ArrayColumn(std::vector<int64_t>{2, 3});
  const std::string s = ArrayStream({-2, -3}, 0);
  PgCopyParser parser(declared, "pg-test", "");
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { parser.Feed(s.data(), s.size()); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("negative dimension"));
}

TEST(PgCopyParserTest, AnHonestArrayStillParses) {
  const auto columns = ArrayColumn();
  const std::string s = ArrayStream({2, 3}, 6);
  PgCopyParser parser(columns, "pg-test", "");
  parser.Feed(s.data(), s.size());
  parser.Finish();
  ColumnTable table = parser.Take();
  EXPECT_EQ(table.rows, 1);
  EXPECT_EQ(table.fields[0].ToString(), "v: float32[2,3]");
  EXPECT_EQ(table.data[0].size(), 24u);
}

// "%-1" decoded to byte 0xFF (from_chars takes a sign).
TEST(DatabaseUriTest, BadPercentEscapesAreRejected) {
  for (const char* uri :
       {"sqlite:/tmp/a%-1.db", "sqlite:/tmp/a%+1.db", "sqlite:/tmp/a% 1.db", "sqlite:/tmp/a%4",
        "sqlite:/tmp/a%zz.db", "sqlite:/tmp/a.db?query=SELECT%-1"}) {
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { ParseDatabaseUri(uri, {}); }, &message),
              ErrorCode::kInvalidArgument)
        << uri;
    EXPECT_THAT(message, HasSubstr("bad %-escape")) << uri;
  }
  EXPECT_EQ(ParseDatabaseUri("sqlite:/tmp/a%41%2f.db", {}).target, "/tmp/aA/.db");
}

TEST(DatabaseUriTest, FieldsWhoseSizeOverflowsAreRejected) {
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf(
          [&] { ParseDatabaseUri("sqlite:/a.db?fields=x:float32[4611686018427387904,4]", {}); },
          &message),
      ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("overflow"));
}

}  // namespace
}  // namespace gpufeed
