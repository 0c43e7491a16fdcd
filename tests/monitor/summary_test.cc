#include "monitor/summary.h"

#include <gtest/gtest.h>

namespace gpufeed {
namespace {

TEST(Summary, PercentilesInterpolateBetweenRanks) {
  std::vector<double> values;
  for (int i = 0; i <= 100; ++i) values.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(values, 0.05), 5);
  EXPECT_DOUBLE_EQ(Percentile(values, 0.95), 95);
  EXPECT_DOUBLE_EQ(Percentile({7}, 0.95), 7);
  EXPECT_DOUBLE_EQ(Percentile({0, 10}, 0.05), 0.5);
}

TEST(Summary, MeanP5P95PerMetricSkippingMissingReadings) {
  std::deque<MonitorSnapshot> history;
  for (int i = 0; i < 21; ++i) {
    MonitorSnapshot s;
    s.elapsed_seconds = i;
    GpuSample gpu;
    gpu.utilization_ratio = i / 20.0;  // 0%..100%
    if (i % 2 == 0) gpu.power_watts = 100;
    s.gpus.push_back(gpu);
    s.host.cpu_utilization_ratio = i == 0 ? std::nullopt : std::optional<double>(0.5);
    history.push_back(s);
  }
  MonitorSummary summary = Summarize(history, {"low"});
  EXPECT_EQ(summary.samples, 21u);
  EXPECT_DOUBLE_EQ(summary.duration_seconds, 20);
  auto find = [&](const std::string& name) -> const MetricSummary* {
    for (const auto& m : summary.metrics) {
      if (m.name == name) return &m;
    }
    return nullptr;
  };
  const MetricSummary* util = find("gpu0_utilization");
  ASSERT_NE(util, nullptr);
  EXPECT_EQ(util->unit, "%");
  EXPECT_NEAR(util->mean, 50, 1e-9);
  EXPECT_NEAR(util->p5, 5, 1e-9);
  EXPECT_NEAR(util->p95, 95, 1e-9);
  ASSERT_NE(find("gpu0_power"), nullptr);
  EXPECT_EQ(find("gpu0_power")->count, 11u);
  EXPECT_EQ(find("cpu_utilization")->count, 20u);
  EXPECT_EQ(find("gpu0_temperature"), nullptr);  // never read: not in the table
  std::string text = summary.ToText();
  EXPECT_NE(text.find("gpu0_utilization"), std::string::npos);
  EXPECT_NE(text.find("warning: low"), std::string::npos);
}

}  // namespace
}  // namespace gpufeed
