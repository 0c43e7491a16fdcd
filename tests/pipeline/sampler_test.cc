#include "pipeline/sampler.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

SamplerOptions Opts(int64_t batch, uint64_t seed = 0) {
  SamplerOptions o;
  o.batch_size = batch;
  o.seed = seed;
  o.rank = 0;
  o.world_size = 1;
  return o;
}

TEST(Sampler, SameSeedAndEpochGiveTheSameOrderAnywhere) {
  Sampler s(10, Opts(4, 42));
  EXPECT_EQ(s.EpochOrder(3), s.EpochOrder(3));
  EXPECT_NE(s.EpochOrder(3), s.EpochOrder(4));
  EXPECT_NE(Sampler(10, Opts(4, 43)).EpochOrder(3), s.EpochOrder(3));
  // Pinned: the order is gpufeed's own keyed permutation (splitmix64 rounds), so it holds on
  // every machine and standard library. A change here breaks every user's resumable runs.
  EXPECT_EQ(Sampler(8, Opts(4, 0)).EpochOrder(0), (std::vector<int64_t>{6, 1, 7, 3, 0, 4, 2, 5}));
  const Sampler huge(int64_t{4'000'000'000}, Opts(4, 0));
  EXPECT_EQ((std::vector<int64_t>{huge.SampleAt(0, 0), huge.SampleAt(0, 1), huge.SampleAt(0, 2)}),
            (std::vector<int64_t>{613145215, 786494128, 697699514}));
  SamplerOptions blocked = Opts(4, 0);
  blocked.shuffle_block = 64;
  const std::vector<int64_t> blocked_order = Sampler(1000, blocked).EpochOrder(0);
  EXPECT_EQ(std::vector<int64_t>(blocked_order.begin(), blocked_order.begin() + 4),
            (std::vector<int64_t>{66, 600, 890, 870}));
}

TEST(Sampler, EverySampleOnceAndBatchesCoverTheEpoch) {
  Sampler s(103, Opts(10, 7));
  const auto order = s.EpochOrder(0);
  const EpochPlan plan = s.Plan(0);
  EXPECT_EQ(s.batches_per_epoch(), 11);
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
    auto batch = s.BatchOf(plan, b);
    EXPECT_EQ(batch.size(), b < 10 ? 10u : 3u);
    EXPECT_EQ(s.BatchRows(plan, b), static_cast<int64_t>(batch.size()));
    seen.insert(seen.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(seen, order) << "batches are the epoch's order, cut batch_size apart";
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> expected(103);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(seen, expected);
}

TEST(Sampler, NoShuffleIsSequential) {
  SamplerOptions o = Opts(3);
  o.shuffle = false;
  EXPECT_EQ(Sampler(5, o).EpochOrder(9), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, ShardsAreDisjointAndCoverEverything) {
  for (bool drop_last : {false, true}) {
    std::multiset<int64_t> all;
    std::vector<int64_t> lengths;
    for (int rank = 0; rank < 3; ++rank) {
      SamplerOptions o = Opts(2, 5);
      o.rank = rank;
      o.world_size = 3;
      o.drop_last = drop_last;
      o.pad = false;
      Sampler s(10, o);
      auto order = s.EpochOrder(1);
      EXPECT_EQ(static_cast<int64_t>(order.size()), s.shard_size());
      lengths.push_back(s.shard_size());
      all.insert(order.begin(), order.end());
    }
    std::set<int64_t> unique(all.begin(), all.end());
    EXPECT_EQ(unique.size(), all.size()) << "a sample is in two shards";
    if (drop_last) {
      // 10 samples over 3 ranks: 9 used, 3 each, then whole batches of 2: 2 each.
      EXPECT_EQ(lengths, (std::vector<int64_t>{2, 2, 2}));
    } else {
      EXPECT_EQ(all.size(), 10u);
      EXPECT_EQ(lengths, (std::vector<int64_t>{4, 3, 3}));
    }
  }
}

// DistributedSampler's rule: without drop_last every rank gets ceil(N / world) samples, the
// shortfall filled from the start of the epoch's order, so ranks run equal step counts.
TEST(Sampler, ShardsArePaddedToEqualLengthFromTheStartOfTheOrder) {
  struct Case {
    int64_t samples, batch;
    int world;
  };
  for (const Case c : {Case{129, 64, 2}, Case{3, 2, 4}, Case{10, 2, 3}, Case{8, 3, 4}}) {
    SamplerOptions base = Opts(c.batch, 7);
    base.world_size = c.world;
    base.rank = 0;
    const std::vector<int64_t> order0 = [&] {
      SamplerOptions one = base;
      one.world_size = 1;
      return Sampler(c.samples, one).EpochOrder(2);
    }();
    std::multiset<int64_t> seen;
    std::vector<int64_t> batches, lengths;
    for (int rank = 0; rank < c.world; ++rank) {
      SamplerOptions o = base;
      o.rank = rank;
      Sampler s(c.samples, o);
      const auto order = s.EpochOrder(2);
      EXPECT_EQ(static_cast<int64_t>(order.size()), s.shard_size());
      batches.push_back(s.batches_per_epoch());
      lengths.push_back(s.shard_size());
      for (size_t i = 0; i < order.size(); ++i) {
        // Position rank + i * world of the padded order, which wraps to the order's start.
        const size_t pos = static_cast<size_t>(rank) + i * static_cast<size_t>(c.world);
        EXPECT_EQ(order[i], order0[pos % order0.size()]) << "rank " << rank << " item " << i;
      }
      seen.insert(order.begin(), order.end());
    }
    const int64_t per_rank = (c.samples + c.world - 1) / c.world;
    EXPECT_EQ(lengths, std::vector<int64_t>(static_cast<size_t>(c.world), per_rank))
        << c.samples << " samples over " << c.world << " ranks";
    EXPECT_EQ(batches, std::vector<int64_t>(static_cast<size_t>(c.world),
                                            (per_rank + c.batch - 1) / c.batch));
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(c.samples))
        << "every sample is in some shard";
  }
}

TEST(Sampler, RankAndWorldSizeComeFromTheEnvironment) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  SamplerOptions o;
  o.batch_size = 1;
  Sampler s(10, o);
  EXPECT_EQ(s.rank(), 1);
  EXPECT_EQ(s.world_size(), 2);
  setenv("RANK", "x", 1);
  EXPECT_THROW(Sampler(10, o), Error);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

TEST(Sampler, NonsenseOptionsAreClearErrors) {
  const auto expect_error = [](SamplerOptions o, const char* text) {
    try {
      Sampler(10, o);
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  expect_error(Opts(0), "batch_size");
  expect_error(Opts(-5), "batch_size");
  SamplerOptions o = Opts(2);
  o.rank = 2;
  o.world_size = 2;
  expect_error(o, "rank 2 is outside");
  o = Opts(2);
  o.world_size = 0;
  expect_error(o, "world_size");
}

TEST(Sampler, BlockShuffleKeepsEverySampleAndTouchesFewerBlocks) {
  const int64_t n = 4096, block = 64, batch = 256;
  SamplerOptions full = Opts(batch, 3);
  SamplerOptions blocked = full;
  blocked.shuffle_block = block;
  blocked.shuffle_window = 2;
  const auto blocks_per_batch = [&](const SamplerOptions& o) {
    Sampler s(n, o);
    auto order = s.EpochOrder(0);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
    const EpochPlan plan = s.Plan(0);
    double total = 0;
    for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
      std::set<int64_t> blocks;
      for (int64_t i : s.BatchOf(plan, b)) blocks.insert(i / block);
      total += static_cast<double>(blocks.size());
    }
    return total / static_cast<double>(s.batches_per_epoch());
  };
  const double full_blocks = blocks_per_batch(full);
  const double block_blocks = blocks_per_batch(blocked);
  EXPECT_GT(full_blocks, 50.0);  // a full shuffle touches nearly every block
  EXPECT_LE(block_blocks, 8.0);  // batch/block = 4, plus window spill
}

// DistributedSampler's rule over many shapes: every rank runs the same number of batches,
// the ranks together cover every sample, and only the padding (at most world - 1 samples from
// the start of the order) repeats; with pad = false, every sample exactly once.
TEST(Sampler, ShardsCoverEverySampleForManyShapes) {
  for (const int64_t n : {1, 2, 3, 5, 7, 31, 64, 65, 127, 128, 129, 1000}) {
    for (const int world : {1, 2, 3, 4, 8}) {
      for (const bool pad : {true, false}) {
        for (const bool shuffle : {true, false}) {
          std::vector<int64_t> seen;
          std::set<int64_t> batches;
          for (int rank = 0; rank < world; ++rank) {
            SamplerOptions o = Opts(4, 11);
            o.rank = rank;
            o.world_size = world;
            o.pad = pad;
            o.shuffle = shuffle;
            const Sampler s(n, o);
            const EpochPlan plan = s.Plan(3);
            for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
              const auto rows = s.BatchOf(plan, b);
              seen.insert(seen.end(), rows.begin(), rows.end());
            }
            batches.insert(s.batches_per_epoch());
          }
          const std::string shape =
              fmt::format("n={} world={} pad={} shuffle={}", n, world, pad, shuffle);
          const std::set<int64_t> unique(seen.begin(), seen.end());
          EXPECT_EQ(unique.size(), static_cast<size_t>(n)) << shape;
          EXPECT_EQ(*unique.begin(), 0) << shape;
          EXPECT_EQ(*unique.rbegin(), n - 1) << shape;
          if (pad) {
            EXPECT_EQ(batches.size(), 1u) << "ranks run unequal batch counts: " << shape;
            EXPECT_EQ(static_cast<int64_t>(seen.size()), (n + world - 1) / world * world) << shape;
          } else {
            EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << shape;
          }
        }
      }
    }
  }
}

TEST(Sampler, AnyBatchIsPlannedAloneAsInTheWholeEpoch) {
  // A resumed run plans batch b on its own: it must be the same rows as in the whole order.
  for (const int64_t block : {int64_t{0}, int64_t{8}}) {
    SamplerOptions o = Opts(7, 99);
    o.rank = 1;
    o.world_size = 3;
    o.shuffle_block = block;
    const Sampler s(200, o);
    const std::vector<int64_t> order = s.EpochOrder(4);
    ASSERT_EQ(static_cast<int64_t>(order.size()), s.shard_size());
    for (int64_t b = s.batches_per_epoch() - 1; b >= 0; --b) {
      const Sampler fresh(200, o);  // nothing carried over from earlier batches
      const auto rows = fresh.BatchOf(fresh.Plan(4), b);
      const auto begin = order.begin() + b * 7;
      EXPECT_EQ(rows, std::vector<int64_t>(begin, begin + static_cast<int64_t>(rows.size())))
          << "batch " << b;
      for (size_t k = 0; k < rows.size(); ++k) {
        EXPECT_EQ(fresh.SampleAt(4, b * 7 + static_cast<int64_t>(k)), rows[k]);
      }
    }
  }
}

TEST(Sampler, SeedsAndEpochsChooseTheOrderForManyCounts) {
  for (const int64_t n : {3, 5, 16, 17, 100, 4096}) {
    const Sampler a(n, Opts(4, 1));
    EXPECT_EQ(a.EpochOrder(0), Sampler(n, Opts(4, 1)).EpochOrder(0)) << n;
    EXPECT_NE(a.EpochOrder(0), Sampler(n, Opts(4, 2)).EpochOrder(0)) << n;
    // A count this small has few orders: some epoch among the next few must differ.
    bool differs = false;
    for (int64_t e = 1; e < 8 && !differs; ++e) differs = a.EpochOrder(0) != a.EpochOrder(e);
    EXPECT_TRUE(differs) << n;
  }
}

TEST(Sampler, HugeCountsArePlannedWithoutMemoryPerSample) {
  const int64_t n = int64_t{4'000'000'000};
  SamplerOptions o = Opts(1024, 5);
  o.world_size = 3;
  o.rank = 2;
  const Sampler s(n, o);
  EXPECT_EQ(s.shard_size(), (n + 2) / 3);
  const EpochPlan plan = s.Plan(7);
  for (const int64_t b : {int64_t{0}, s.batches_per_epoch() / 2, s.batches_per_epoch() - 1}) {
    const auto rows = s.BatchOf(plan, b);
    EXPECT_EQ(static_cast<int64_t>(rows.size()), s.BatchRows(plan, b));
    for (int64_t r : rows) {
      ASSERT_GE(r, 0);
      ASSERT_LT(r, n);
    }
    EXPECT_EQ(std::set<int64_t>(rows.begin(), rows.end()).size(), rows.size());
  }
}

}  // namespace
}  // namespace gpufeed
