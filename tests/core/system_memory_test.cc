#include "core/system/system_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/system/proc_text.h"
#include "monitor/monitor_test_util.h"

namespace gpufeed {
namespace {

using testing::TempDir;

TEST(SystemMemory, AvailableRamIsTheTightestOfMemAvailableAndTheCgroupsHeadroom) {
  TempDir root;
  root.Write("proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable:    8000000 kB\n");
  root.Write("proc/self/cgroup", "0::/job/train\n");
  root.Write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  // The parent's limit is the tighter one: the leaf's own limit is not what binds.
  root.Write("sys/fs/cgroup/job/memory.max", "3000000000\n");
  root.Write("sys/fs/cgroup/job/train/memory.max", "max\n");
  root.Write("sys/fs/cgroup/job/train/memory.current", "1000000000\n");
  EXPECT_EQ(AvailableRamBytes(root.path()), uint64_t{2000000000});
  root.Write("sys/fs/cgroup/job/memory.max", "max\n");
  EXPECT_EQ(AvailableRamBytes(root.path()), uint64_t{8000000} * 1024);
}

TEST(SystemMemory, HybridHostsReadTheMemoryLimitFromCgroupV1) {
  TempDir root;
  root.Write("proc/meminfo", "MemAvailable:    8000000 kB\n");
  root.Write("proc/self/cgroup", "5:memory:/docker/abc\n0::/\n");
  root.Write("sys/fs/cgroup/unified/cgroup.controllers", "");
  root.Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "1500000000\n");
  root.Write("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "500000000\n");
  EXPECT_EQ(AvailableRamBytes(root.path()), uint64_t{1000000000});
}

TEST(SystemMemory, NothingReadableMeansZeroNotACrash) {
  TempDir root;
  EXPECT_EQ(AvailableRamBytes(root.path()), uint64_t{0});
}

TEST(SystemMemory, UsableCpusFollowsTheCpuQuotaRoundedUpAndNeverDropsToZero) {
  const int online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  TempDir root;
  EXPECT_EQ(UsableCpus(root.path()), online);  // no cgroup files: every online CPU
  root.Write("proc/self/cgroup", "0::/job\n");
  root.Write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  root.Write("sys/fs/cgroup/job/cpu.max", "50000 100000\n");  // half a core
  EXPECT_EQ(UsableCpus(root.path()), 1);
  root.Write("sys/fs/cgroup/job/cpu.max", "100000 100000\n");  // exactly one
  EXPECT_EQ(UsableCpus(root.path()), 1);
  root.Write("sys/fs/cgroup/job/cpu.max", "max 100000\n");
  EXPECT_EQ(UsableCpus(root.path()), online);
}

TEST(SystemMemory, OnlineCpusAndPhysicalRamAreTheMachines) {
  EXPECT_EQ(OnlineCpus(), std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))));
  // MemTotal is the physical RAM less what the kernel reserved at boot (or, in a container
  // with a meminfo of its own, less still).
  std::string meminfo;
  ASSERT_TRUE(ReadTextFile("/proc/meminfo", &meminfo));
  const auto info = ParseMemInfo(meminfo);
  ASSERT_TRUE(info.has_value());
  EXPECT_GE(PhysicalRamBytes(), info->total_bytes);
}

TEST(SystemMemory, ABudgetFromTheEnvironmentIsAWholeNumberOrAWarningAndTheDefault) {
  std::vector<std::string> warnings;
  LogSink previous =
      SetLogSink([&](LogLevel, std::string_view message) { warnings.emplace_back(message); });
  constexpr const char* kName = "GPUFEED_TEST_BUDGET_BYTES";
  unsetenv(kName);
  EXPECT_EQ(BytesFromEnv(kName, 7), 7u);
  setenv(kName, "", 1);
  EXPECT_EQ(BytesFromEnv(kName, 7), 7u);
  setenv(kName, "0", 1);
  EXPECT_EQ(BytesFromEnv(kName, 7), 0u);
  setenv(kName, "4294967296", 1);
  EXPECT_EQ(BytesFromEnv(kName, 7), uint64_t{4} << 30);
  EXPECT_TRUE(warnings.empty());
  for (const char* wrong : {"4GB", "-1", " 12", "1e9", "99999999999999999999999"}) {
    setenv(kName, wrong, 1);
    EXPECT_EQ(BytesFromEnv(kName, 7), 7u) << wrong;
    ASSERT_FALSE(warnings.empty()) << wrong;
    EXPECT_NE(warnings.back().find(std::string(kName) + "='" + wrong + "'"), std::string::npos)
        << warnings.back();
  }
  unsetenv(kName);
  SetLogSink(std::move(previous));
}

}  // namespace
}  // namespace gpufeed
