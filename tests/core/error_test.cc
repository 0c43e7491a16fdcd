#include "gpufeed/error.h"

#include <gtest/gtest.h>

namespace gpufeed {
namespace {

TEST(Error, CarriesCodeAndMessage) {
  const Error e(ErrorCode::kCorruptData, "bad.npy: truncated");
  EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
  EXPECT_STREQ(e.what(), "bad.npy: truncated");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kIo), "I/O error");
}

TEST(ErrorDeathTest, AssertAbortsWithLocation) {
  EXPECT_DEATH(GPUFEED_ASSERT(1 == 2, "math broke"), "math broke");
}

}  // namespace
}  // namespace gpufeed
