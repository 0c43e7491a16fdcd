#include "gpufeed/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gpufeed {
namespace {

TEST(DType, SizesAndNamesRoundTrip) {
  for (DType d : {DType::kBool, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
                  DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kFloat16,
                  DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    EXPECT_EQ(ParseDType(DTypeName(d)), d);
  }
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_FALSE(ParseDType("complex64").has_value());
}

TEST(DType, HalfConversionIsExactForRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
}

TEST(DType, HalfRoundsToNearestEvenAndSaturates) {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // Slightly above halfway rounds up.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);  // overflow -> inf
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);  // underflow -> zero
}

TEST(DType, BFloat16KeepsTheExponentRange) {
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  const float big = BFloat16ToFloat(FloatToBFloat16(3.0e38f));  // float16 would be inf
  EXPECT_FALSE(std::isinf(big));
  EXPECT_NEAR(big / 3.0e38f, 1.0f, 1.0f / 128);
  EXPECT_NEAR(BFloat16ToFloat(FloatToBFloat16(3.14159f)), 3.140625f, 1e-6);
}

}  // namespace
}  // namespace gpufeed
