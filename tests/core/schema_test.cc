#include "gpufeed/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

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

}  // namespace
}  // namespace gpufeed
