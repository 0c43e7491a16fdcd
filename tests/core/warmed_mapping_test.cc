#include "core/io/warmed_mapping.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The warmer is opt-in (GPUFEED_MAPPING_WARMER=1); these tests are about it.
const bool kWarmerOn = setenv("GPUFEED_MAPPING_WARMER", "1", 1) == 0;

// A temporary file of `bytes`, mapped read-only; unlinked and unmapped at the end.
struct MappedFile {
  std::string path;
  int fd = -1;
  const std::byte* map = nullptr;
  uint64_t bytes = 0;
  explicit MappedFile(uint64_t n) : bytes(n) {
    char name[] = "/tmp/gpufeed-warmed-XXXXXX";
    fd = mkstemp(name);
    path = name;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(n)), 0);
    void* p = mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    map = static_cast<const std::byte*>(p);
  }
  ~MappedFile() {
    munmap(const_cast<std::byte*>(map), bytes);
    close(fd);
    unlink(path.c_str());
  }
};

// Waits for the warmer to end (a generous bound for a loaded machine, no timing assumed).
uint64_t SettledWarmEnd(const WarmedMapping& w) {
  for (int i = 0; i < 6000 && !w.Settled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(w.Settled());
  return w.WarmEnd();
}

TEST(WarmedMapping, ASmallRangeIsWarmFromTheStart) {
  MappedFile f(4 * kMiB);
  WarmedMapping w(f.map, 128, 4 * kMiB, f.path, /*min_bytes=*/8 * kMiB);
  EXPECT_EQ(w.WarmEnd(), 4 * kMiB);
  EXPECT_TRUE(w.Warm(4 * kMiB));
}

TEST(WarmedMapping, WithoutTheEnvironmentSwitchEverythingIsWarmFromTheStart) {
  ASSERT_TRUE(kWarmerOn);
  MappedFile f(4 * kMiB);
  unsetenv("GPUFEED_MAPPING_WARMER");
  WarmedMapping off(f.map, 0, 4 * kMiB, f.path, /*min_bytes=*/1);
  setenv("GPUFEED_MAPPING_WARMER", "1", 1);
  EXPECT_EQ(off.WarmEnd(), 4 * kMiB) << "every row from the mapping: the default";
  EXPECT_TRUE(off.Settled());
  WarmedMapping on(f.map, 0, 4 * kMiB, f.path, /*min_bytes=*/1);
  EXPECT_EQ(on.WarmEnd(), 0u);
}

TEST(WarmedMapping, NoMappingCountsAsWarmSoReadersNeverWaitForIt) {
  WarmedMapping w(nullptr, 0, 64 * kMiB, "none", /*min_bytes=*/1);
  EXPECT_EQ(w.WarmEnd(), 64 * kMiB);
}

TEST(WarmedMapping, ALargeRangeIsColdUntilStartedThenWarmsToItsEnd) {
  MappedFile f(6 * kMiB + 123);
  WarmedMapping w(f.map, 64, 6 * kMiB + 123, f.path, /*min_bytes=*/1 * kMiB);
  EXPECT_EQ(w.WarmEnd(), 64u) << "nothing warm before StartWarming: the open starts no thread";
  EXPECT_FALSE(w.Warm(65));
  w.StartWarming();
  w.StartWarming();  // once
  EXPECT_EQ(SettledWarmEnd(w), 6 * kMiB + 123);
}

TEST(WarmedMapping, AFileTruncatedUnderTheWarmerStopsItWithoutACrash) {
  MappedFile f(16 * kMiB);
  ASSERT_EQ(ftruncate(f.fd, static_cast<off_t>(3 * kMiB)), 0);  // pages past 3 MiB: SIGBUS
  WarmedMapping w(f.map, 0, 16 * kMiB, f.path, /*min_bytes=*/1 * kMiB);
  w.StartWarming();
  const uint64_t end = SettledWarmEnd(w);
  EXPECT_LE(end, 4 * kMiB) << "the warmer stopped where the file ends";
  EXPECT_FALSE(w.Warm(16 * kMiB));
}

TEST(WarmedMapping, DestroyedWhileWarmingJoinsItsThread) {
  MappedFile f(64 * kMiB);
  for (int i = 0; i < 3; ++i) {
    WarmedMapping w(f.map, 0, 64 * kMiB, f.path, /*min_bytes=*/1 * kMiB);
    w.StartWarming();
  }  // each destructor stops and joins (TSan and ASan see a leak or race otherwise)
  SUCCEED();
}

}  // namespace
}  // namespace gpufeed
