// What gpufeed/source.h defines beside the Source interface: the cache tier names.
#include "gpufeed/source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

TEST(CacheTierTest, NamesRoundTripAndUnknownNamesListTheChoices) {
  for (const CacheTier tier :
       {CacheTier::kAuto, CacheTier::kNone, CacheTier::kRam, CacheTier::kShm, CacheTier::kDevice}) {
    EXPECT_EQ(ParseCacheTier(CacheTierName(tier)), tier);
  }
  try {
    ParseCacheTier("disk");
    FAIL() << "'disk' is no tier";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(),
                ::testing::HasSubstr("'disk' is not one of auto, none, ram, shm, device"));
  }
}

}  // namespace
}  // namespace gpufeed
