// The small shared helpers of core: number parsing, trimming and splitting, byte formatting,
// the log sink, tenths progress, the row gather, splitmix64 and whole-buffer fd reads/writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "core/format.h"
#include "core/io/fd_io.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/row_gather.h"
#include "core/splitmix.h"
#include "core/system/system_memory.h"
#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

using ::testing::ElementsAre;

TEST(ParseNumberTest, TakesWholeStringsOnly) {
  EXPECT_EQ(ParseNumber<int>("42"), 42);
  EXPECT_EQ(ParseNumber<int64_t>("-7"), -7);
  EXPECT_EQ(ParseNumber<float>("0.25"), 0.25f);
  EXPECT_EQ(ParseNumber<int>(""), std::nullopt);
  EXPECT_EQ(ParseNumber<int>("12abc"), std::nullopt);
  EXPECT_EQ(ParseNumber<int>(" 12"), std::nullopt);
  EXPECT_EQ(ParseNumber<int>("+12"), std::nullopt);
  EXPECT_EQ(ParseNumber<uint64_t>("-1"), std::nullopt);
  EXPECT_EQ(ParseNumber<int>("99999999999"), std::nullopt);  // out of range
}

TEST(TextTest, TrimAndSplit) {
  EXPECT_EQ(Trim("  a b \n"), "a b");
  EXPECT_EQ(Trim(" \t\n"), "");
  EXPECT_THAT(Split("a,,b", ','), ElementsAre("a", "", "b"));
  EXPECT_THAT(Split("", ','), ElementsAre(""));
  EXPECT_THAT(Split("cast:mel:float16", ':'), ElementsAre("cast", "mel", "float16"));
}

TEST(FormatBytesTest, SiUnitsWithOneDecimalWhereItCarries) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(8192), "8.2 KB");
  EXPECT_EQ(FormatBytes(2.1e6), "2.1 MB");
  EXPECT_EQ(FormatBytes(800e6), "800 MB");
  EXPECT_EQ(FormatBytes(10e9), "10.0 GB");
  EXPECT_EQ(FormatBytes(-5), "0 B");
}

TEST(LogTest, TheSinkReceivesEveryMessageAndTheDefaultComesBack) {
  std::vector<std::pair<LogLevel, std::string>> got;
  LogSink previous = SetLogSink(
      [&](LogLevel level, std::string_view message) { got.emplace_back(level, message); });
  Log(LogLevel::kWarning, "cache: WARNING: x");
  Log(LogLevel::kInfo, "device auto -> cpu: y");
  SetLogSink(std::move(previous));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, LogLevel::kWarning);
  EXPECT_EQ(got[0].second, "cache: WARNING: x");
  EXPECT_EQ(got[1].second, "device auto -> cpu: y");
  testing::internal::CaptureStderr();
  Log(LogLevel::kInfo, "to stderr");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "gpufeed: to stderr\n");
}

TEST(TenthsProgressTest, SilentForShortJobsAndNeverAtOneHundred) {
  std::vector<std::string> lines;
  LogSink previous =
      SetLogSink([&](LogLevel, std::string_view message) { lines.emplace_back(message); });
  {
    TenthsProgress quick(true, 10,
                         [](int percent, uint64_t, double) { return std::to_string(percent); });
    for (int i = 0; i < 10; ++i) quick.Add(1);  // done well within 2 s
  }
  EXPECT_TRUE(lines.empty());
  TenthsProgress slow(
      true, 100,
      [](int percent, uint64_t done, double) {
        return std::to_string(percent) + "/" + std::to_string(done);
      },
      0.05);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  slow.Add(5);   // 5%: no tenth yet
  slow.Add(30);  // 35%: the 30% line
  slow.Add(5);   // 40%
  slow.Add(1);   // 41%: the same tenth again
  slow.Add(59);  // 100%: never said
  TenthsProgress off(false, 100, [](int, uint64_t, double) { return std::string("off"); });
  off.Add(50);
  SetLogSink(std::move(previous));
  EXPECT_THAT(lines, ElementsAre("30/35", "40/40"));
}

TEST(GatherRowsTest, CopiesTheAskedRowsInOrderWithRepeats) {
  const std::array<std::byte, 6> src = {std::byte{1}, std::byte{2}, std::byte{3},
                                        std::byte{4}, std::byte{5}, std::byte{6}};
  std::array<std::byte, 8> dst{};
  const std::array<int64_t, 4> rows = {2, 0, 2, 1};
  GatherRows(src.data(), 2, rows, dst.data());
  EXPECT_THAT(dst, ElementsAre(std::byte{5}, std::byte{6}, std::byte{1}, std::byte{2}, std::byte{5},
                               std::byte{6}, std::byte{3}, std::byte{4}));
}

TEST(SplitMixTest, MatchesTheReferenceSequence) {
  // splitmix64 seeded with 0: its first outputs (Vigna's reference implementation).
  EXPECT_EQ(Mix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(Mix64(kSplitMixGamma), 0x6e789e6aa1b965f4ULL);
}

TEST(RamBudgetTest, HalfOfWhatIsAvailable) {
  EXPECT_EQ(RamBudgetBytes(10'000'000'000), 5'000'000'000u);
  EXPECT_EQ(RamBudgetBytes(0), 0u);
}

TEST(FdIoTest, WriteAllThenReadAllRoundTripsAndAnEarlyEndIsFalse) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text(1000, 'x');
  ASSERT_TRUE(WriteAll(fds[1], text.data(), text.size()));
  close(fds[1]);
  std::string back(text.size(), '\0');
  EXPECT_TRUE(ReadAll(fds[0], back.data(), back.size()));
  EXPECT_EQ(back, text);
  char more = 0;
  EXPECT_FALSE(ReadAll(fds[0], &more, 1));  // the writer closed: end of file
  close(fds[0]);
}

}  // namespace
}  // namespace gpufeed
