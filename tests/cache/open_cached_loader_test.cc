// OpenCachedLoader: the device and the transforms are given once, in CachedLoaderOptions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/cache.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/schema.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

std::shared_ptr<Source> Data() {
  return OpenSynthetic(ParseSchema("x:float32[4],label:int64"), 64, 1);
}

TEST(OpenCachedLoader, TheDeviceAndTransformsGoWhereTheyAreGivenOnce) {
  CachedLoaderOptions options;
  options.loader.batch_size = 16;
  options.device = "cpu";
  options.transforms = {"cast:x:float16"};
  CachedLoader out = OpenCachedLoader(Data(), options);
  EXPECT_EQ(out.loader->options().device->name(), "cpu");
  EXPECT_EQ(out.loader->options().transforms.size(), 1u);
}

TEST(OpenCachedLoader, ASecondPlaceForTheDeviceOrTransformsIsRefused) {
  for (int which = 0; which < 3; ++which) {
    CachedLoaderOptions options;
    options.loader.batch_size = 16;
    if (which == 0) options.loader.device = HostDevice();
    if (which == 1) options.cache.device = HostDevice();
    if (which == 2) options.loader.transforms = {ParseTransform("cast:x:float16")};
    try {
      OpenCachedLoader(Data(), options);
      ADD_FAILURE() << "accepted case " << which;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), ::testing::HasSubstr("CachedLoaderOptions::device"));
    }
  }
}

}  // namespace
}  // namespace gpufeed
