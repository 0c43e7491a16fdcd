#include "pipeline/sampler_permutation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace gpufeed {
namespace {

// Counts that stress the bit widths: tiny, primes, and powers of two and their neighbours
// (a power of two fills its domain; one past it nearly doubles the domain).
std::vector<int64_t> Counts() {
  std::vector<int64_t> counts = {0, 1, 2, 3, 5, 7, 11, 13, 31, 97, 101, 997, 1009, 4099, 65521};
  for (int bits = 2; bits <= 16; ++bits) {
    const int64_t p = int64_t{1} << bits;
    counts.insert(counts.end(), {p - 1, p, p + 1});
  }
  return counts;
}

// True when `f` maps [0, n) onto [0, n), each value once.
template <typename F>
::testing::AssertionResult IsBijection(int64_t n, F f) {
  std::vector<char> hit(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = f(i);
    if (x < 0 || x >= n) {
      return ::testing::AssertionFailure()
             << "f(" << i << ") = " << x << " outside [0, " << n << ")";
    }
    if (hit[static_cast<size_t>(x)]++ != 0) {
      return ::testing::AssertionFailure() << "f(" << i << ") = " << x << " twice, n = " << n;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(KeyedPermutation, IsABijectionForEveryCountAndKey) {
  for (const int64_t n : Counts()) {
    for (const uint64_t key : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeefcafef00dULL}}) {
      const KeyedPermutation p(n, key);
      EXPECT_EQ(p.size(), n);
      EXPECT_TRUE(IsBijection(n, [&](int64_t i) { return p(i); })) << "key " << key;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p.Inverse(p(i)), i) << "n " << n;
    }
  }
}

TEST(KeyedPermutation, TheKeyChoosesThePermutation) {
  for (const int64_t n : {int64_t{10}, int64_t{257}, int64_t{100000}}) {
    const KeyedPermutation a(n, 1);
    const KeyedPermutation a_again(n, 1);
    const KeyedPermutation b(n, 2);
    int64_t same_as_b = 0;
    int64_t fixed = 0;
    double distance = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(a(i), a_again(i));
      same_as_b += a(i) == b(i) ? 1 : 0;
      fixed += a(i) == i ? 1 : 0;
      distance += std::abs(static_cast<double>(a(i) - i));
    }
    EXPECT_LT(same_as_b, n / 2) << n;
    EXPECT_LT(fixed, n / 2) << n;
    if (n >= 1000) {
      // A random permutation moves an item n/3 places on average: a weak mix (consecutive
      // rows staying near each other) would show far less.
      EXPECT_NEAR(distance / static_cast<double>(n), static_cast<double>(n) / 3.0,
                  0.05 * static_cast<double>(n));
      EXPECT_LT(fixed, 20);  // a random permutation has one fixed point on average
    }
  }
}

TEST(KeyedPermutation, NeighboursLandApart) {
  // Consecutive inputs must not map to consecutive outputs: count how often p(i+1) = p(i)+1.
  const int64_t n = 1 << 20;
  const KeyedPermutation p(n, 42);
  int64_t runs = 0;
  for (int64_t i = 0; i + 1 < n; ++i) runs += p(i + 1) == p(i) + 1 ? 1 : 0;
  EXPECT_LT(runs, 20);
}

TEST(KeyedPermutation, LargeCountsStayInRange) {
  for (const int64_t n : {int64_t{4'000'000'000}, (int64_t{1} << 40) + 3, INT64_MAX}) {
    const KeyedPermutation p(n, 7);
    for (int64_t i : {int64_t{0}, int64_t{1}, n / 2, n - 2, n - 1}) {
      const int64_t x = p(i);
      ASSERT_GE(x, 0);
      ASSERT_LT(x, n);
      ASSERT_EQ(p.Inverse(x), i);
    }
  }
}

TEST(EpochShuffle, EveryModeIsABijection) {
  for (const int64_t n : Counts()) {
    for (const int64_t block : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{64}}) {
      for (const int window : {1, 3, 4}) {
        const EpochShuffle s(n, {.shuffle = true, .seed = 9, .block = block, .window = window}, 5);
        EXPECT_TRUE(IsBijection(n, [&](int64_t i) { return s.At(i); }))
            << "block " << block << " window " << window;
      }
    }
    const EpochShuffle none(n, {.shuffle = false}, 3);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(none.At(i), i);
  }
}

TEST(EpochShuffle, AWindowCacheChangesNothing) {
  // Positions asked for in any order through one cache give what each gives alone.
  const int64_t n = 5000;
  const EpochShuffle s(n, {.shuffle = true, .seed = 4, .block = 10, .window = 3}, 1);
  ShuffleWindowCache cache;
  for (int64_t step : {int64_t{1}, int64_t{7}, int64_t{-3}, int64_t{31}}) {
    int64_t p = step > 0 ? 0 : n - 1;
    for (int k = 0; k < 2000; ++k, p = ((p + step) % n + n) % n) {
      ASSERT_EQ(s.At(p, cache), s.At(p)) << "position " << p;
    }
  }
}

TEST(EpochShuffle, BlockShuffleWindowsHoldWholeBlocks) {
  // Each window is `window` whole blocks (the short last block one of them, wherever it
  // lands): every block's rows lie in one window, and a window holds at most `window` blocks.
  // Seeds and epochs vary where the short block lands, before, inside and after most windows.
  const int64_t n = 1000, block = 16;
  const int window = 3;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      const EpochShuffle s(n, {.shuffle = true, .seed = seed, .block = block, .window = window},
                           epoch);
      std::map<int64_t, int64_t> window_of_block;
      std::map<int64_t, std::set<int64_t>> blocks_of_window;
      ShuffleWindowCache cache;
      int64_t w = 0;
      for (int64_t p = 0; p < n; ++p) {
        const int64_t b = s.At(p, cache) / block;
        // Windows are consecutive runs of positions: a new window starts when one is full.
        if (blocks_of_window[w].size() == static_cast<size_t>(window) &&
            blocks_of_window[w].count(b) == 0) {
          ++w;
        }
        blocks_of_window[w].insert(b);
        const auto [it, added] = window_of_block.emplace(b, w);
        ASSERT_EQ(it->second, w) << "block " << b << " split across windows (seed " << seed
                                 << ", epoch " << epoch << ", position " << p << ")";
      }
      EXPECT_EQ(window_of_block.size(), static_cast<size_t>((n + block - 1) / block));
    }
  }
}

TEST(EpochShuffle, SeedAndEpochChooseTheOrder) {
  const int64_t n = 1000;
  const auto order = [&](uint64_t seed, int64_t epoch, int64_t block) {
    const EpochShuffle s(n, {.shuffle = true, .seed = seed, .block = block, .window = 4}, epoch);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(s.At(i));
    return out;
  };
  for (const int64_t block : {int64_t{0}, int64_t{32}}) {
    EXPECT_EQ(order(1, 2, block), order(1, 2, block));
    EXPECT_NE(order(1, 2, block), order(1, 3, block));
    EXPECT_NE(order(1, 2, block), order(2, 2, block));
  }
}

}  // namespace
}  // namespace gpufeed
