// What gpufeed/source.h defines beside the Source interface: the cache tier names.
#include "gpufeed/source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

TEST(CacheTierTest, NamesRoundTripAndUnknownNamesListTheChoices) {
  for (const CacheTierSpelling& t : kCacheTiers) {
    EXPECT_EQ(CacheTierName(t.tier), t.name);
    EXPECT_EQ(ParseCacheTier(t.name), t.tier);
  }
  EXPECT_EQ(ParseCacheTier("disk"), CacheTier::kDisk);
  try {
    ParseCacheTier("tape");
    FAIL() << "'tape' is no tier";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(),
                ::testing::HasSubstr("'tape' is not one of auto, none, ram, shm, device, disk"));
  }
}

}  // namespace
}  // namespace gpufeed
