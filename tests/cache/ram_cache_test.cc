#include "cache/ram_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "cache/cache_test_util.h"
#include "gpufeed/cache.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

using testing::InstrumentedSource;
using testing::ReadAll;
using testing::ReadRows;

std::shared_ptr<Source> Synthetic(int64_t samples) {
  return OpenSynthetic(ParseSchema("x:float32[3,5],label:int64[],b:uint8[7]"), samples, 42);
}

TEST(RamCacheTest, ServesTheBaseSamplesAndReadsEachFromTheBaseOnce) {
  auto base = std::make_shared<InstrumentedSource>(Synthetic(1000));
  RamCachedSource cache(base);
  EXPECT_EQ(cache.cache_tier(), CacheTier::kRam);
  EXPECT_EQ(base->cache_tier(), CacheTier::kNone);
  const auto expected = ReadAll(*Synthetic(1000));
  base->samples_read = 0;
  std::vector<int64_t> order(1000);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto state = cache.NewWorkerState();
    for (size_t b = 0; b < order.size(); b += 64) {
      std::vector<int64_t> idx(order.begin() + b, order.begin() + std::min(order.size(), b + 64));
      const auto got = ReadRows(cache, idx, state.get());
      for (size_t f = 0; f < got.size(); ++f) {
        const size_t row = cache.schema().fields[f].SampleBytes();
        for (size_t i = 0; i < idx.size(); ++i) {
          ASSERT_EQ(std::memcmp(got[f].data() + i * row, expected[f].data() + idx[i] * row, row), 0)
              << "epoch " << epoch << " field " << f << " sample " << idx[i];
        }
      }
    }
    // The first epoch fills the cache; later ones never touch the base source.
    EXPECT_EQ(base->samples_read.load(), 1000) << "epoch " << epoch;
  }
  EXPECT_EQ(cache.filled_samples(), 1000);
}

TEST(RamCacheTest, RepeatedIndicesInOneBatchAreServed) {
  RamCachedSource cache(Synthetic(10));
  const std::vector<int64_t> idx = {3, 3, 7, 3};
  const auto got = ReadRows(cache, idx);
  const auto want = ReadRows(*Synthetic(10), idx);
  EXPECT_EQ(got, want);
  EXPECT_EQ(ReadRows(cache, idx), want);
}

TEST(RamCacheTest, PreloadFillsEverythingAndMatchesTheBase) {
  auto base = std::make_shared<InstrumentedSource>(Synthetic(5000));
  RamCachedSource cache(base);
  ReadRows(cache, {10, 4000});  // some samples filled before the preload
  cache.Preload(3, false);
  EXPECT_EQ(cache.filled_samples(), 5000);
  EXPECT_EQ(base->samples_read.load(), 5000);
  EXPECT_EQ(ReadAll(cache), ReadAll(*Synthetic(5000)));
  EXPECT_EQ(base->samples_read.load(), 5000);
}

TEST(RamCacheTest, ConcurrentWorkersFillingTheSameSamplesAgree) {
  auto base = std::make_shared<InstrumentedSource>(Synthetic(2000));
  RamCachedSource cache(base);
  const auto expected = ReadAll(*Synthetic(2000));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      auto state = cache.NewWorkerState();
      for (int b = 0; b < 100; ++b) {
        std::vector<int64_t> idx(32);
        for (auto& i : idx) i = static_cast<int64_t>(rng() % 2000);
        const auto got = ReadRows(cache, idx, state.get());
        const size_t row = cache.schema().fields[0].SampleBytes();
        for (size_t i = 0; i < idx.size(); ++i) {
          if (std::memcmp(got[0].data() + i * row, expected[0].data() + idx[i] * row, row) != 0) {
            ++mismatches;
          }
        }
      }
    });
  }
  cache.Preload(2, false);
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(cache.filled_samples(), 2000);
  EXPECT_EQ(ReadAll(cache), expected);
}

TEST(RamCacheTest, AFailedBaseReadLeavesTheSamplesToRetry) {
  auto base = std::make_shared<InstrumentedSource>(Synthetic(100));
  RamCachedSource cache(base);
  base->fail = true;
  EXPECT_THROW(ReadRows(cache, {1, 2, 3}), Error);
  EXPECT_THROW(cache.Preload(2, false), Error);
  EXPECT_EQ(cache.filled_samples(), 0);
  base->fail = false;
  EXPECT_EQ(ReadRows(cache, {1, 2, 3}), ReadRows(*Synthetic(100), {1, 2, 3}));
  EXPECT_EQ(cache.filled_samples(), 3);
}

TEST(RamCacheTest, OutOfRangeIndexIsAnError) {
  RamCachedSource cache(Synthetic(10));
  try {
    ReadRows(cache, {10});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(RamCacheTest, OpenCachedRamWithPreloadAndInfo) {
  auto base = std::make_shared<InstrumentedSource>(Synthetic(300));
  CacheInfo info;
  auto cached = OpenCached(
      base, {.tier = CacheTier::kRam, .preload = true, .verbose = false, .background = false},
      &info);
  EXPECT_EQ(info.tier, CacheTier::kRam);
  EXPECT_EQ(info.bytes, uint64_t{300} * cached->schema().SampleBytes());
  EXPECT_EQ(base->samples_read.load(), 300);
  EXPECT_EQ(cached->Identity(), base->Identity());
  EXPECT_EQ(ReadAll(*cached), ReadAll(*Synthetic(300)));
  EXPECT_EQ(base->samples_read.load(), 300);
}

TEST(RamCacheTest, OpenCachedNoneAndMemorySourcesReturnTheSourceItself) {
  auto base = Synthetic(10);
  EXPECT_EQ(OpenCached(base, {.tier = CacheTier::kNone, .verbose = false}), base);
  static const float data[4] = {1, 2, 3, 4};
  auto memory = OpenMemory({{.spec = {"x", DType::kFloat32, {}}, .data = data, .samples = 4}});
  CacheInfo info;
  EXPECT_EQ(OpenCached(memory, {.verbose = false}, &info), memory);
  EXPECT_EQ(info.tier, CacheTier::kNone);
}

}  // namespace
}  // namespace gpufeed
