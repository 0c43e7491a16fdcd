#include "core/host_memory_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class HostMemoryPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool().Trim();
    pool().SetRetainBytes(64 * kMiB);
  }
  void TearDown() override { pool().Trim(); }
  static HostMemoryPool& pool() { return HostMemoryPool::Instance(); }
};

TEST_F(HostMemoryPoolTest, BlocksAreHugePageAlignedWholePages) {
  void* p = pool().Take(3 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 * kMiB), 0u);
  std::memset(p, 1, HostMemoryPool::Rounded(3 * kMiB));  // all of it is ours to write
  // Whole 2 MB pages while the last one wastes at most an eighth; whole 4 KiB pages beyond.
  EXPECT_EQ(HostMemoryPool::Rounded(3 * kMiB), 3 * kMiB);
  EXPECT_EQ(HostMemoryPool::Rounded(2 * kMiB + 2048), 2 * kMiB + 4096);
  EXPECT_EQ(HostMemoryPool::Rounded(31 * kMiB), 32 * kMiB);
  EXPECT_EQ(HostMemoryPool::Rounded(67 * kMiB + 1), 68 * kMiB);
  EXPECT_EQ(HostMemoryPool::Rounded(1), 4096u);
  EXPECT_TRUE(pool().Give(p));
}

TEST_F(HostMemoryPoolTest, AGivenBlockIsTakenAgainWithItsBytesAndNoFreshFault) {
  auto* p = static_cast<unsigned char*>(pool().Take(4 * kMiB));
  std::memset(p, 0xAB, 4 * kMiB);
  const auto before = pool().counters();
  ASSERT_TRUE(pool().Give(p));
  EXPECT_EQ(pool().counters().kept_bytes, before.kept_bytes + int64_t(4 * kMiB));
  auto* q = static_cast<unsigned char*>(pool().Take(4 * kMiB - 100));  // same rounded size
  EXPECT_EQ(q, p);
  EXPECT_EQ(q[4 * kMiB - 1], 0xAB);  // not zeroed again: the last user's bytes
  const auto after = pool().counters();
  EXPECT_EQ(after.taken_kept, before.taken_kept + 1);
  EXPECT_EQ(after.taken_fresh, before.taken_fresh);
  EXPECT_EQ(after.fresh_bytes, before.fresh_bytes);  // nothing faulted in
  EXPECT_EQ(after.fault_ns, before.fault_ns);
  pool().Give(q);
}

TEST_F(HostMemoryPoolTest, ADifferentSizeGetsAFreshBlock) {
  void* p = pool().Take(2 * kMiB);
  pool().Give(p);
  const auto before = pool().counters();
  void* q = pool().Take(6 * kMiB);
  const auto after = pool().counters();
  EXPECT_EQ(after.taken_fresh, before.taken_fresh + 1);
  // The fresh block's rounded bytes and the time it took to fault them in are counted
  // (what gpufeed bench reports as the run's fresh batch memory).
  EXPECT_EQ(after.fresh_bytes, before.fresh_bytes + int64_t(6 * kMiB));
  EXPECT_GT(after.fault_ns, before.fault_ns);
  pool().Give(q);
}

TEST_F(HostMemoryPoolTest, KeepsNoMoreThanItsBudget) {
  pool().SetRetainBytes(8 * kMiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool().Take(4 * kMiB));
  for (void* p : blocks) pool().Give(p);
  EXPECT_EQ(pool().counters().kept_bytes, int64_t(8 * kMiB));
  pool().SetRetainBytes(0);
  EXPECT_EQ(pool().counters().kept_bytes, 0);
}

TEST_F(HostMemoryPoolTest, RefusesPointersItDidNotGive) {
  int local = 0;
  EXPECT_FALSE(pool().Give(&local));
  EXPECT_FALSE(pool().Give(nullptr));
}

TEST_F(HostMemoryPoolTest, ManyThreadsTakeAndGive) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 20; ++i) {
        auto* p = static_cast<unsigned char*>(HostMemoryPool::Instance().Take(2 * kMiB));
        p[0] = static_cast<unsigned char>(t);
        EXPECT_TRUE(HostMemoryPool::Instance().Give(p));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(pool().counters().kept_bytes, int64_t(64 * kMiB));
}

}  // namespace
}  // namespace gpufeed
