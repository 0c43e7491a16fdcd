#include <gtest/gtest.h>

#include "gpufeed/device.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

TEST(DeviceId, PrintsAndParsesTheUserFacingSpellings) {
  EXPECT_EQ(DeviceId::Cpu().ToString(), "cpu");
  EXPECT_EQ(DeviceId::Cuda(0).ToString(), "cuda:0");
  EXPECT_EQ(DeviceId::Cuda(12).ToString(), "cuda:12");
  EXPECT_EQ(DeviceId::Parse("cpu"), DeviceId::Cpu());
  EXPECT_EQ(DeviceId::Parse("cuda:3"), DeviceId::Cuda(3));
  for (const int ordinal : {0, 1, 7, 123}) {
    const DeviceId id = DeviceId::Cuda(ordinal);
    EXPECT_EQ(DeviceId::Parse(id.ToString()), id);
  }
  EXPECT_EQ(DeviceTypeName(DeviceType::kCpu), "cpu");
  EXPECT_EQ(DeviceTypeName(DeviceType::kCuda), "cuda");
}

TEST(DeviceId, RejectsEverythingElse) {
  for (const char* text : {"", "cuda", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "cuda: 1",
                           "cuda:99999999999", "CPU", "cpu:0", "gpu:0", "auto"}) {
    EXPECT_EQ(DeviceId::Parse(text), std::nullopt) << text;
  }
}

TEST(DeviceId, TheHostDeviceIsTheCpuAndSameDeviceComparesIds) {
  EXPECT_EQ(HostDevice()->id(), DeviceId::Cpu());
  EXPECT_EQ(HostDevice()->name(), "cpu");
  EXPECT_TRUE(SameDevice(*HostDevice(), *HostDevice()));
  EXPECT_FALSE(DeviceId::Cpu().is_cuda());
  EXPECT_TRUE(DeviceId::Cuda(0).is_cuda());
  EXPECT_NE(DeviceId::Cuda(0), DeviceId::Cuda(1));
  EXPECT_NE(DeviceId::Cuda(0), DeviceId::Cpu());
}

TEST(DeviceId, OpenDeviceTakesTheSameSpellings) {
  EXPECT_EQ(OpenDevice("cpu")->id(), DeviceId::Cpu());
  for (const char* bad : {"cuda:-1", "cuda:x", "gpu", "cuda:"}) {
    try {
      OpenDevice(bad);
      FAIL() << bad << " opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace gpufeed
