#include "core/system/cgroup_reader.h"

#include <gtest/gtest.h>

#include "monitor/monitor_test_util.h"

namespace gpufeed {
namespace {

using testing::TempDir;

TEST(CgroupReader, V2TakesTheTightestLimitOverAncestorsAndTheLeafsUsage) {
  TempDir dir;
  dir.Write("proc/42/cgroup", "0::/job/train\n");
  dir.Write("cg/cgroup.controllers", "cpu memory\n");
  dir.Write("cg/job/cpu.max", "150000 100000\n");  // 1.5 cores
  dir.Write("cg/job/memory.max", "8589934592\n");
  dir.Write("cg/job/train/cpu.max", "max 100000\n");
  dir.Write("cg/job/train/memory.max", "4294967296\n");
  dir.Write("cg/job/train/memory.current", "1073741824\n");
  dir.Write("cg/job/train/cpu.stat",
            "usage_usec 1000\nuser_usec 600\nsystem_usec 400\nnr_periods 50\n"
            "nr_throttled 7\nthrottled_usec 2500000\n");
  CgroupReading reading = CgroupReader(dir.File("proc"), dir.File("cg"), 42).Read();
  EXPECT_DOUBLE_EQ(reading.cpu_limit_cores.value(), 1.5);
  EXPECT_EQ(reading.memory_limit_bytes.value(), 4294967296u);
  EXPECT_EQ(reading.memory_used_bytes.value(), 1073741824u);
  EXPECT_EQ(reading.cpu_throttled_periods.value(), 7u);
  EXPECT_DOUBLE_EQ(reading.cpu_throttled_seconds.value(), 2.5);
}

TEST(CgroupReader, UnlimitedIsNoReadingNotAHugeNumber) {
  TempDir dir;
  dir.Write("proc/42/cgroup", "0::/\n");
  dir.Write("cg/cgroup.controllers", "");
  dir.Write("cg/memory.max", "max\n");
  dir.Write("cg/cpu.max", "max 100000\n");
  CgroupReading reading = CgroupReader(dir.File("proc"), dir.File("cg"), 42).Read();
  EXPECT_FALSE(reading.cpu_limit_cores);
  EXPECT_FALSE(reading.memory_limit_bytes);
}

TEST(CgroupReader, HybridHostsFallBackToV1ForControllersV2Lacks) {
  TempDir dir;
  dir.Write("proc/42/cgroup", "4:memory:/box\n1:cpu,cpuacct:/\n0::/\n");
  dir.Write("cg/unified/cgroup.controllers", "hugetlb\n");
  dir.Write("cg/cpu/cpu.cfs_quota_us", "200000\n");
  dir.Write("cg/cpu/cpu.cfs_period_us", "100000\n");
  dir.Write("cg/cpu/cpu.stat", "nr_periods 9\nnr_throttled 3\nthrottled_time 500000000\n");
  dir.Write("cg/memory/box/memory.limit_in_bytes", "9223372036854771712\n");  // unlimited
  dir.Write("cg/memory/box/memory.usage_in_bytes", "7180288\n");
  CgroupReading reading = CgroupReader(dir.File("proc"), dir.File("cg"), 42).Read();
  EXPECT_DOUBLE_EQ(reading.cpu_limit_cores.value(), 2.0);
  EXPECT_EQ(reading.cpu_throttled_periods.value(), 3u);
  EXPECT_DOUBLE_EQ(reading.cpu_throttled_seconds.value(), 0.5);
  EXPECT_FALSE(reading.memory_limit_bytes);
  EXPECT_EQ(reading.memory_used_bytes.value(), 7180288u);
}

TEST(CgroupReader, NoCgroupFileMeansNoReadings) {
  TempDir dir;
  CgroupReading reading = CgroupReader(dir.File("proc"), dir.File("cg"), 42).Read();
  EXPECT_FALSE(reading.cpu_limit_cores);
  EXPECT_FALSE(reading.memory_used_bytes);
}

}  // namespace
}  // namespace gpufeed
