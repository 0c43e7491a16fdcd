#include "core/system/proc_text.h"

#include <gtest/gtest.h>

namespace gpufeed {
namespace {

TEST(ProcText, ProcStatBusyLeavesOutIdleAndIowaitAndCountsGuestOnce) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  auto ticks = ParseProcStatCpu("cpu  100 20 30 400 50 6 4 10 7 3\ncpu0 1 2 3 4\n");
  ASSERT_TRUE(ticks);
  EXPECT_EQ(ticks->total, 100u + 20 + 30 + 400 + 50 + 6 + 4 + 10);
  EXPECT_EQ(ticks->busy, 100u + 20 + 30 + 6 + 4 + 10);
  EXPECT_FALSE(ParseProcStatCpu("intr 5\n"));
  EXPECT_FALSE(ParseProcStatCpu("cpu  1 x 3 4\n"));
}

TEST(ProcText, PidStatParsesAfterTheLastParenthesis) {
  // comm "a) (b" holds spaces and parentheses; fields after it are numbered from 3.
  std::string text =
      "4242 (a) (b) S 17 4242 4242 0 -1 4194560 500 0 0 0 "
      "123 45 6 7 20 0 3 0 98765 1000000 2560 18446744073709551615\n";
  auto stat = ParsePidStat(text);
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->pid, 4242);
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->ppid, 17);
  EXPECT_EQ(stat->utime, 123u);
  EXPECT_EQ(stat->stime, 45u);
  EXPECT_EQ(stat->cutime, 6u);
  EXPECT_EQ(stat->cstime, 7u);
  EXPECT_EQ(stat->start_time, 98765u);
  EXPECT_EQ(stat->rss_pages, 2560);
  EXPECT_FALSE(ParsePidStat("4242 (truncated) S 1 2"));
  EXPECT_FALSE(ParsePidStat(""));
}

TEST(ProcText, KeyedValuesInKilobytesAndPlain) {
  std::string rollup = "Rss:                1748 kB\nPss:                 396 kB\nPss_Anon: 1 kB\n";
  EXPECT_EQ(ParseKeyedValue(rollup, "Pss"), 396u * 1024);
  EXPECT_EQ(ParseKeyedValue(rollup, "Rss"), 1748u * 1024);
  EXPECT_FALSE(ParseKeyedValue(rollup, "Swap"));
  EXPECT_EQ(ParseKeyedValue("rchar: 6976\nread_bytes: 4096\n", "read_bytes"), 4096u);
  auto mem = ParseMemInfo("MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 250 kB\n");
  ASSERT_TRUE(mem);
  EXPECT_EQ(mem->total_bytes, 1000u * 1024);
  EXPECT_EQ(mem->available_bytes, 250u * 1024);
  EXPECT_FALSE(ParseMemInfo("MemTotal: 1000 kB\n"));
}

TEST(ProcText, DiskstatsCountsWholeDisksOnly) {
  std::string text =
      "   7       0 loop0 5 0 999 0 0 0 0 0 0 0 0\n"
      " 254       0 vda 39200 13627 1000 12094 49383 15189 3829272 12906 0 9716 26051\n"
      " 254       1 vda1 100 0 600 0 0 0 0 0 0 0 0\n"
      " 259       0 nvme0n1 1 0 10 0 0 0 0 0 0 0 0\n"
      " 259       1 nvme0n1p1 1 0 8 0 0 0 0 0 0 0 0\n"
      " 253       0 zram0 1 0 77 0 0 0 0 0 0 0 0\n"
      " 252       0 dm-0 1 0 55 0 0 0 0 0 0 0 0\n";
  EXPECT_EQ(ParseDiskstatsReadBytes(text), (1000u + 10u) * 512);
}

}  // namespace
}  // namespace gpufeed
