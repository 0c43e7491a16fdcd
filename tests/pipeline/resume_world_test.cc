// A state saved at one world size resumes at another: the ranks together deliver the rest of
// the epoch's global order, no sample twice beyond the padding, none skipped, every rank the
// same number of batches. Ranks are simulated in one process, one sampler or loader per rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "pipeline/loader_test_util.h"
#include "pipeline/sampler.h"

namespace gpufeed {
namespace {

using loader_test::Data;
using loader_test::Epoch;
using loader_test::Opts;
using ::testing::HasSubstr;

constexpr int64_t kSamples = 1003;  // a prime: no multiple of any batch size or world size
constexpr int64_t kBatch = 10;
constexpr int64_t kEpoch = 2;

struct Mode {
  std::string name;
  bool shuffle;
  int64_t block;
  bool drop_last;
};

std::vector<Mode> Modes() {
  std::vector<Mode> modes;
  for (bool drop_last : {false, true}) {
    modes.push_back({"none", false, 0, drop_last});
    modes.push_back({"full", true, 0, drop_last});
    modes.push_back({"block", true, 7, drop_last});
  }
  return modes;
}

SamplerOptions SamplerOpts(const Mode& m, int rank, int world) {
  return {.batch_size = kBatch,
          .shuffle = m.shuffle,
          .seed = 11,
          .drop_last = m.drop_last,
          .rank = rank,
          .world_size = world,
          .shuffle_block = m.block,
          .shuffle_window = 3};
}

// The epoch's global order: what one rank alone is dealt.
std::vector<int64_t> GlobalOrder(const Mode& m) {
  Mode whole = m;
  whole.drop_last = false;
  return Sampler(kSamples, SamplerOpts(whole, 0, 1)).EpochOrder(kEpoch);
}

// Every rank's batches of `plan`-like plans starting at `start`: [rank][batch][row].
std::vector<std::vector<std::vector<int64_t>>> Deal(const Mode& m, int world, int64_t start) {
  std::vector<std::vector<std::vector<int64_t>>> ranks;
  for (int r = 0; r < world; ++r) {
    const Sampler sampler(kSamples, SamplerOpts(m, r, world));
    const EpochPlan plan = sampler.Plan(kEpoch, start);
    ranks.emplace_back();
    for (int64_t b = 0; b < sampler.BatchesOf(plan); ++b) {
      ranks.back().push_back(sampler.BatchOf(plan, b));
    }
  }
  return ranks;
}

// The rest of the global order [start, N) dealt to `world` ranks: with drop_last exactly its
// first full batches' worth, else all of it, the padding (fewer than `world` samples) repeating
// the rest from its start.
void ExpectRemainderDealt(const std::vector<std::vector<std::vector<int64_t>>>& ranks,
                          const std::vector<int64_t>& order, int64_t start, bool drop_last) {
  const int world = static_cast<int>(ranks.size());
  std::vector<int64_t> all;
  for (const auto& rank : ranks) {
    EXPECT_EQ(rank.size(), ranks[0].size()) << "ranks run unequal batch counts";
    for (const auto& batch : rank) all.insert(all.end(), batch.begin(), batch.end());
  }
  const auto rest = static_cast<int64_t>(order.size()) - start;
  std::multiset<int64_t> got(all.begin(), all.end());
  std::multiset<int64_t> want;
  if (drop_last) {
    const int64_t kept = rest / world / kBatch * kBatch * world;
    want.insert(order.begin() + start, order.begin() + start + kept);
  } else {
    const int64_t padded = (rest + world - 1) / world * world;
    for (int64_t i = 0; i < padded; ++i) want.insert(order[static_cast<size_t>(start + i % rest)]);
    EXPECT_LT(padded - rest, world);
  }
  EXPECT_EQ(got, want);
}

TEST(ResumeWorld, TheRestOfTheGlobalOrderIsDealtToAnyWorldSize) {
  for (const Mode& m : Modes()) {
    SCOPED_TRACE(m.name + (m.drop_last ? " drop_last" : ""));
    const std::vector<int64_t> order = GlobalOrder(m);
    for (int64_t k : {0, 1, 7, 24}) {
      SCOPED_TRACE("after " + std::to_string(k) + " steps at world size 4");
      // Four ranks take k batches each; what they took is a prefix of the global order.
      const auto before = Deal(m, 4, 0);
      const Sampler rank0(kSamples, SamplerOpts(m, 0, 4));
      const int64_t consumed = rank0.GlobalConsumed(rank0.Plan(kEpoch), k);
      std::set<int64_t> taken;
      for (const auto& rank : before) {
        for (int64_t b = 0; b < std::min<int64_t>(k, static_cast<int64_t>(rank.size())); ++b) {
          taken.insert(rank[static_cast<size_t>(b)].begin(), rank[static_cast<size_t>(b)].end());
        }
      }
      if (k < static_cast<int64_t>(before[0].size())) {
        EXPECT_EQ(taken, std::set<int64_t>(order.begin(), order.begin() + consumed));
      } else {
        EXPECT_EQ(consumed, kSamples);  // the epoch is over, whatever drop_last left out
      }
      for (int world : {2, 8, 1, 3, 4}) {
        SCOPED_TRACE("resumed at world size " + std::to_string(world));
        ExpectRemainderDealt(Deal(m, world, consumed), order, consumed, m.drop_last);
      }
    }
  }
}

TEST(ResumeWorld, UnpaddedShardsDealEverySampleOfTheRestOnce) {
  const Mode m{"full", true, 0, false};
  const std::vector<int64_t> order = GlobalOrder(m);
  for (int world : {3, 8}) {
    std::multiset<int64_t> got;
    for (int r = 0; r < world; ++r) {
      SamplerOptions o = SamplerOpts(m, r, world);
      o.pad = false;
      const Sampler sampler(kSamples, o);
      const EpochPlan plan = sampler.Plan(kEpoch, 400);
      for (int64_t b = 0; b < sampler.BatchesOf(plan); ++b) {
        for (int64_t i : sampler.BatchOf(plan, b)) got.insert(i);
      }
    }
    EXPECT_EQ(got, std::multiset<int64_t>(order.begin() + 400, order.end()));
  }
}

TEST(ResumeWorld, APlanStartsOnlyWithinItsEpoch) {
  const Sampler sampler(kSamples, SamplerOpts(Modes()[1], 0, 2));
  EXPECT_THROW(sampler.Plan(0, -1), Error);
  EXPECT_THROW(sampler.Plan(0, kSamples + 1), Error);
  EXPECT_EQ(sampler.BatchesOf(sampler.Plan(0, kSamples)), 0);
}

// Loaders, one per rank, all at step k; then loaders of another world size restored from the
// state of one rank of them.
struct RankRuns {
  std::vector<std::vector<std::vector<int64_t>>> ranks;  // [rank][batch][row]
  std::vector<LoaderState> states;                       // each rank's, after the batches
};

RankRuns RunRanks(const Data& data, const LoaderOptions& base, int world, int64_t steps,
                  const LoaderState* resume) {
  RankRuns run;
  for (int r = 0; r < world; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    o.world_size = world;
    Loader loader(data.Open(), o);
    if (resume != nullptr) loader.Restore(*resume);
    run.ranks.emplace_back();
    for (int64_t s = 0; s < steps; ++s) {
      auto batch = loader.Next();
      if (!batch) break;
      run.ranks.back().push_back(loader_test::CheckedLabels(*batch));
    }
    run.states.push_back(loader.State());
  }
  return run;
}

std::multiset<int64_t> Samples(const RankRuns& run) {
  std::multiset<int64_t> out;
  for (const auto& rank : run.ranks) {
    for (const auto& batch : rank) out.insert(batch.begin(), batch.end());
  }
  return out;
}

TEST(ResumeWorld, LoadersOfAnotherWorldSizeGoOnFromOneRanksState) {
  const Data data(kSamples);
  for (const Mode& m : Modes()) {
    SCOPED_TRACE(m.name + (m.drop_last ? " drop_last" : ""));
    LoaderOptions base = Opts(kBatch, 2);
    base.shuffle = m.shuffle;
    base.shuffle_block = m.block;
    base.shuffle_window = 3;
    base.drop_last = m.drop_last;
    base.seed = 11;
    base.start_epoch = kEpoch;
    const std::vector<int64_t> order = GlobalOrder(m);
    const RankRuns first = RunRanks(data, base, 4, 9, nullptr);
    for (const LoaderState& s : first.states) {
      EXPECT_EQ(s.global_consumed, first.states[0].global_consumed);
    }
    const int64_t consumed = first.states[0].global_consumed.value_or(-1);
    EXPECT_EQ(Samples(first), std::multiset<int64_t>(order.begin(), order.begin() + consumed));
    for (int world : {2, 8, 1, 3}) {
      SCOPED_TRACE("resumed at world size " + std::to_string(world));
      const RankRuns rest = RunRanks(data, base, world, 1000, &first.states[world % 4]);
      ExpectRemainderDealt(rest.ranks, order, consumed, m.drop_last);
      for (const LoaderState& s : rest.states) {
        EXPECT_EQ(s.epoch, kEpoch + 1);  // the rest of the epoch, then the next one
        EXPECT_EQ(s.global_consumed, 0);
      }
    }
  }
}

TEST(ResumeWorld, AResumedRunSavesAndMovesAgainAndItsNextEpochIsWhole) {
  const Data data(kSamples);
  LoaderOptions base = Opts(kBatch, 2);
  base.seed = 11;
  base.start_epoch = kEpoch;
  const Mode m{"full", true, 0, false};
  const std::vector<int64_t> order = GlobalOrder(m);
  const RankRuns at4 = RunRanks(data, base, 4, 5, nullptr);
  const RankRuns at3 = RunRanks(data, base, 3, 6, &at4.states[1]);
  const int64_t consumed = at3.states[2].global_consumed.value_or(-1);
  EXPECT_EQ(consumed, 5 * kBatch * 4 + 6 * kBatch * 3);
  std::multiset<int64_t> so_far = Samples(at4);
  for (int64_t i : Samples(at3)) so_far.insert(i);
  EXPECT_EQ(so_far, std::multiset<int64_t>(order.begin(), order.begin() + consumed));
  // The same rank and world size, restored mid-way through a resumed epoch's rest.
  const RankRuns again = RunRanks(data, base, 3, 1000, &at3.states[0]);
  ExpectRemainderDealt(again.ranks, order, consumed, false);

  LoaderOptions one = base;
  one.rank = 1;
  one.world_size = 2;
  Loader resumed(data.Open(), one);
  resumed.Restore(at4.states[3]);
  resumed.SetEpoch(kEpoch + 1);
  const auto next_epoch = Epoch(resumed);
  one.start_epoch = kEpoch + 1;
  Loader fresh(data.Open(), one);
  EXPECT_EQ(next_epoch, Epoch(fresh));
  // SetEpoch(kEpoch) replays the whole epoch, as it does after any restore.
  resumed.Restore(at4.states[3]);
  resumed.SetEpoch(kEpoch);
  EXPECT_EQ(Epoch(resumed).size(), static_cast<size_t>((kSamples + 1) / 2 / kBatch + 1));
}

TEST(ResumeWorld, AStateOfTheSameWorldSizeFromAnotherRankResumesThere) {
  const Data data(kSamples);
  LoaderOptions base = Opts(kBatch, 2);
  const RankRuns at4 = RunRanks(data, base, 4, 5, nullptr);
  LoaderOptions o = base;
  o.rank = 2;
  o.world_size = 4;
  Loader reference(data.Open(), o);
  auto expected = Epoch(reference);
  expected.erase(expected.begin(), expected.begin() + 5);
  Loader resumed(data.Open(), o);
  resumed.Restore(at4.states[0]);
  EXPECT_EQ(Epoch(resumed), expected);
}

TEST(ResumeWorld, AStateWithoutAGlobalPositionKeepsItsWorldSize) {
  const Data data(kSamples);
  LoaderOptions o = Opts(kBatch, 2);
  o.world_size = 4;
  Loader at4(data.Open(), o);
  at4.Next();
  LoaderState state = at4.State();
  ASSERT_TRUE(state.global_consumed.has_value());
  state.global_consumed.reset();  // saved before the position was recorded
  o.world_size = 2;
  Loader at2(data.Open(), o);
  try {
    at2.Restore(state);
    FAIL() << "a state without its global position changed world size";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("saved with world_size 4, this loader has 2"));
  }
  state.global_consumed = kSamples + 1;
  EXPECT_THROW(at2.Restore(state), Error);
  state.world_size = 2;
  state.global_consumed.reset();
  at2.Restore(state);  // the same world size: as before
}

TEST(ResumeWorld, PackedGroupsChangeWorldSizeOnlyAtAnEpochsBoundary) {
  std::vector<int64_t> offsets = {0};
  for (int g = 0; g < 90; ++g) offsets.push_back(offsets.back() + 1 + g % 7);
  const int64_t n = offsets.back();
  const Data data(n);
  std::shared_ptr<GroupTable> table = GroupTable::FromOffsets(offsets, n, "offsets");
  LoaderOptions o = Opts(16, 2);
  o.groups = table;
  o.pack = true;
  o.world_size = 4;
  Loader at4(data.Open(), o);
  const LoaderState start = at4.State();
  EXPECT_EQ(start.global_consumed, 0);
  at4.Next();
  const LoaderState mid = at4.State();
  EXPECT_FALSE(mid.global_consumed.has_value());
  o.world_size = 2;
  Loader at2(data.Open(), o);
  try {
    at2.Restore(mid);
    FAIL() << "packed groups changed world size mid-epoch";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("packed groups are dealt to ranks by a packing"));
  }
  at2.Restore(start);
  EXPECT_EQ(at2.Next()->index(), 0);
}

}  // namespace
}  // namespace gpufeed
