#include "gpufeed/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(Schema, ParsesFieldsShapesAndScalars) {
  const Schema s = ParseSchema("mel:float32[1,64,32], label:int64[]");
  ASSERT_EQ(s.fields.size(), 2u);
  EXPECT_EQ(s.fields[0].name, "mel");
  EXPECT_EQ(s.fields[0].shape, (std::vector<int64_t>{1, 64, 32}));
  EXPECT_EQ(s.fields[0].SampleBytes(), 1u * 64 * 32 * 4);
  EXPECT_TRUE(s.fields[1].shape.empty());
  EXPECT_EQ(s.fields[1].SampleBytes(), 8u);
  EXPECT_EQ(s.SampleBytes(), 8192u + 8u);
  EXPECT_EQ(ParseSchema("x:uint8").fields[0].shape.size(), 0u);
}

TEST(Schema, RejectsNonsenseNamingThePart) {
  for (const char* bad : {"", "mel", "mel:float99[2]", "mel:float32[0]", "mel:float32[2",
                          "a:int8,a:int8", ":int8"}) {
    try {
      ParseSchema(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("bad schema"));
    }
  }
}

TEST(Schema, FieldLookupNamesTheFieldsPresent) {
  const Schema s = ParseSchema("mel:float32[2],label:int64");
  EXPECT_EQ(s.IndexOf("label"), 1);
  EXPECT_EQ(s.IndexOf("nope"), -1);
  try {
    s.Field("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("mel, label"));
  }
}

// Every shape product and byte count is checked; none wraps.
TEST(Schema, SizesThatOverflowAreErrorsNeverWrappedNumbers) {
  const auto code_and_message = [](auto&& f, std::string* message) {
    try {
      f();
    } catch (const Error& e) {
      *message = e.what();
      return e.code();
    }
    return ErrorCode::kCancelled;
  };
  std::string message;
  // A zero dimension must not hide the overflowing rest, in any order.
  for (const auto& shape : {std::vector<int64_t>{0, int64_t{1} << 62, int64_t{1} << 62},
                            std::vector<int64_t>{int64_t{1} << 62, int64_t{1} << 62, 0},
                            std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}}) {
    const FieldSpec f{"mel", DType::kFloat32, shape};
    EXPECT_EQ(code_and_message([&] { (void)f.ElementsPerSample(); }, &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, AllOf(HasSubstr("mel"), HasSubstr("overflows")));
    EXPECT_EQ(code_and_message([&] { (void)f.SampleBytes(); }, &message), ErrorCode::kCorruptData);
  }
  // 2^62 elements fit in 63 bits; 2^62 x 4 bytes do not.
  const FieldSpec big{"x", DType::kFloat32, {int64_t{1} << 62}};
  EXPECT_EQ(big.ElementsPerSample(), int64_t{1} << 62);
  EXPECT_EQ(code_and_message([&] { (void)big.SampleBytes(); }, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("bytes per sample overflow"));
  const FieldSpec negative{"x", DType::kFloat32, {3, -1}};
  EXPECT_EQ(code_and_message([&] { (void)negative.SampleBytes(); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("negative dimension -1"));
  // The sum over fields is checked too.
  Schema two{{{"a", DType::kUInt8, {int64_t{1} << 62}}, {"b", DType::kUInt8, {int64_t{3} << 61}}}};
  EXPECT_EQ(code_and_message([&] { (void)two.SampleBytes(); }, &message), ErrorCode::kCorruptData);
  // ParseSchema refuses them as a bad argument, naming the part.
  for (const char* spec : {"x:float32[4611686018427387904,4]",
                           "x:uint8[4611686018427387904],"
                           "y:uint8[6917529027641081856]",
                           "x:int64[99999999999,99999999999]"}) {
    EXPECT_EQ(code_and_message([&] { ParseSchema(spec); }, &message), ErrorCode::kInvalidArgument)
        << spec;
    EXPECT_THAT(message, HasSubstr("overflow")) << spec;
  }
}

}  // namespace
}  // namespace gpufeed
