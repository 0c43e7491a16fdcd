#include "monitor/low_utilization_rule.h"

#include <gtest/gtest.h>

namespace gpufeed {
namespace {

TEST(LowUtilizationRule, FiresOnceAtTheFirstLowReadingThatCompletesTheDuration) {
  LowUtilizationRule rule(0.30, 10.0);
  EXPECT_FALSE(rule.Observe(0, 0.90));
  for (int t = 1; t < 11; ++t) EXPECT_FALSE(rule.Observe(t, 0.10)) << "t=" << t;
  auto stretch = rule.Observe(11, 0.20);  // 10 s after the first low reading at t=1
  ASSERT_TRUE(stretch);
  EXPECT_DOUBLE_EQ(stretch->start_seconds, 1);
  EXPECT_DOUBLE_EQ(stretch->end_seconds, 11);
  EXPECT_NEAR(stretch->mean_ratio, (10 * 0.10 + 0.20) / 11, 1e-12);
  EXPECT_FALSE(rule.Observe(12, 0.10));  // same stretch: no repeat
  EXPECT_FALSE(rule.Observe(30, 0.10));
}

TEST(LowUtilizationRule, AReadingAtTheThresholdOrMissingEndsTheStretch) {
  LowUtilizationRule rule(0.30, 5.0);
  EXPECT_FALSE(rule.Observe(0, 0.0));
  EXPECT_FALSE(rule.Observe(4, 0.0));
  EXPECT_FALSE(rule.Observe(5, 0.30));  // at the threshold is not below it
  EXPECT_FALSE(rule.Observe(6, 0.0));
  EXPECT_FALSE(rule.Observe(10, std::nullopt));  // n/a cannot show the GPU stayed idle
  EXPECT_FALSE(rule.Observe(11, 0.0));
  EXPECT_FALSE(rule.Observe(15.9, 0.0));
  EXPECT_TRUE(rule.Observe(16, 0.0));
  // After recovering, a new stretch can fire again.
  EXPECT_FALSE(rule.Observe(17, 0.9));
  EXPECT_FALSE(rule.Observe(18, 0.1));
  EXPECT_TRUE(rule.Observe(23, 0.1));
}

}  // namespace
}  // namespace gpufeed
