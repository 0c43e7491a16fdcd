#include "gpufeed/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "core/log.h"
#include "core/thread_annotations.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "pipeline/loader_checks.h"
#include "pipeline/loader_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

// A data set whose values tell which sample they came from: label[i] = i,
using loader_test::CheckedLabels;
using loader_test::Data;
using loader_test::Epoch;
using loader_test::Opts;
using loader_test::TestSource;

TEST(Loader, EverySampleExactlyOncePerEpochWithCorrectValues) {
  Data data(1000);
  Loader loader(data.Open(), Opts(64, 3));
  EXPECT_EQ(loader.batches_per_epoch(), 16);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    auto batches = Epoch(loader);
    ASSERT_EQ(batches.size(), 16u);
    EXPECT_EQ(batches.back().size(), 1000u - 15 * 64);
    for (auto& b : batches) seen.insert(b.begin(), b.end());
    EXPECT_EQ(seen.size(), 1000u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 1000u);
  }
}

TEST(Loader, SameSeedSameBatchesWhateverTheWorkerCount) {
  Data data(500);
  Loader one(data.Open(), Opts(32, 1));
  Loader four(data.Open(), Opts(32, 4));
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto a = Epoch(one);
    EXPECT_EQ(a, Epoch(four));
    if (epoch == 0) {
      LoaderOptions other = Opts(32, 2);
      other.seed = 2;
      Loader different(data.Open(), other);
      EXPECT_NE(a, Epoch(different));
    }
  }
}

TEST(Loader, EpochsAdvanceAndSetEpochReplaysAnEpoch) {
  Data data(100);
  Loader loader(data.Open(), Opts(10));
  EXPECT_EQ(loader.epoch(), 0);
  const auto e0 = Epoch(loader);
  EXPECT_EQ(loader.epoch(), 1);
  loader.SetEpoch(1);  // already there: keeps what the workers prefetched
  const auto e1 = Epoch(loader);
  EXPECT_NE(e0, e1);
  loader.SetEpoch(0);
  EXPECT_EQ(Epoch(loader), e0);
  auto first = loader.Next();
  EXPECT_EQ(first->epoch(), 1);
  EXPECT_EQ(first->index(), 0);
}

TEST(Loader, ResumeMidEpochYieldsExactlyTheRemainingBatches) {
  Data data(300);
  Loader reference(data.Open(), Opts(16));
  Epoch(reference);
  const auto expected = Epoch(reference);  // epoch 1

  Loader first(data.Open(), Opts(16));
  Epoch(first);
  for (int i = 0; i < 7; ++i) first.Next();
  const std::string saved = first.State().ToJson();

  Loader resumed(data.Open(), Opts(16));
  resumed.Restore(LoaderState::FromJson(saved));
  const auto rest = Epoch(resumed);
  ASSERT_EQ(rest.size(), expected.size() - 7);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), expected.begin() + 7));

  LoaderOptions other = Opts(16);
  other.seed = 99;
  Loader wrong(data.Open(), other);
  EXPECT_THROW(wrong.Restore(LoaderState::FromJson(saved)), Error);
  EXPECT_THROW(LoaderState::FromJson("{\"epoch\": 1}"), Error);
}

// A state saved over the earlier, materialised shuffled order ("shuffle": "full") resumes at
// an epoch's start, never mid-epoch, where the keyed order would repeat and skip samples.
TEST(Loader, AStateOfTheEarlierShuffledOrderResumesOnlyAtAnEpochsStart) {
  Data data(300);
  Loader first(data.Open(), Opts(16));
  for (int i = 0; i < 7; ++i) first.Next();
  LoaderState state = first.State();
  EXPECT_EQ(state.shuffle, "keyed-full");
  state.shuffle = "full";
  Loader resumed(data.Open(), Opts(16));
  try {
    resumed.Restore(state);
    FAIL() << "a mid-epoch state of the earlier order was restored";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("by an earlier gpufeed"));
    EXPECT_THAT(e.what(), HasSubstr("batch 7 of epoch 0"));
  }
  state.shuffle.reset();  // states older still recorded no shuffle at all
  EXPECT_THROW(resumed.Restore(state), Error);
  state.shuffle = "full";
  state.batch = 0;
  state.epoch = 2;
  resumed.Restore(state);
  EXPECT_EQ(resumed.Next()->epoch(), 2);
  state.shuffle = "block:64:4";
  EXPECT_THROW(resumed.Restore(state), Error);  // another mode altogether
}

TEST(Loader, WorkerErrorIsRaisedByNextWithTheSampleAndFile) {
  Data data(200);
  auto source = std::make_shared<TestSource>(data.Open(), /*fail_at=*/123);
  Loader loader(source, Opts(10));
  try {
    while (loader.Next()) {
    }
    FAIL() << "the error was lost";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr("test.bin"));
    EXPECT_THAT(e.what(), HasSubstr("sample 123"));
  }
  EXPECT_THROW(loader.Next(), Error);  // stays failed until restarted
}

TEST(Loader, DroppingMidEpochJoinsEveryThreadQuickly) {
  Data data(10000);
  auto source = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/20);
  auto loader = std::make_unique<Loader>(source, Opts(8, 4));
  loader->Next();
  const auto start = std::chrono::steady_clock::now();
  loader.reset();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  EXPECT_LT(ms, 100);
  const int reads = source->reads.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(source->reads.load(), reads) << "a worker still runs after the loader is gone";
}

TEST(Loader, ShardsArePaddedSoEveryRankRunsTheSameSteps) {
  for (const auto& [samples, batch, world] :
       {std::tuple<int64_t, int64_t, int>{129, 64, 2}, {3, 64, 4}, {10, 4, 3}}) {
    Data data(samples);
    std::vector<std::vector<size_t>> sizes;
    std::set<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      LoaderOptions o = Opts(batch);
      o.rank = rank;
      o.world_size = world;
      Loader loader(data.Open(), o);
      sizes.emplace_back();
      for (auto& b : Epoch(loader)) {
        sizes.back().push_back(b.size());
        seen.insert(b.begin(), b.end());
      }
    }
    for (int rank = 1; rank < world; ++rank) EXPECT_EQ(sizes[rank], sizes[0]) << "rank " << rank;
    EXPECT_EQ(seen.size(), static_cast<size_t>(samples));
    LoaderOptions unpadded = Opts(batch);
    unpadded.rank = world - 1;
    unpadded.world_size = world;
    unpadded.pad = false;
    if (samples % world != 0) {
      EXPECT_EQ(Loader(data.Open(), unpadded).samples_per_epoch(), samples / world);
    }
  }
}

TEST(Loader, DropLastAndShardingPerRank) {
  Data data(103);
  std::multiset<int64_t> all;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = Opts(10);
    o.rank = rank;
    o.world_size = 2;
    o.drop_last = true;
    Loader loader(data.Open(), o);
    EXPECT_EQ(loader.batches_per_epoch(), 5);
    for (auto& b : Epoch(loader)) {
      EXPECT_EQ(b.size(), 10u);
      all.insert(b.begin(), b.end());
    }
  }
  EXPECT_EQ(all.size(), 100u);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 100u);
}

TEST(Loader, TransformsChangeTheSchemaAndValues) {
  Data data(50);
  LoaderOptions o = Opts(8);
  o.transforms = {Normalize("x", 5.0f, 10.0f), Cast("x", DType::kFloat16)};
  Loader loader(data.Open(), o);
  EXPECT_EQ(loader.schema().Field("x").dtype, DType::kFloat16);
  auto batch = loader.Next();
  const auto x = batch->field("x");
  const auto label = batch->field("label");
  for (int64_t r = 0; r < batch->size(); ++r) {
    const int64_t i = label.as<int64_t>()[r];
    const float expected = (static_cast<float>(i * 10 + 1) - 5.0f) / 10.0f;
    EXPECT_NEAR(HalfToFloat(x.as<uint16_t>()[r * 4 + 1]), expected, 1e-3f * (1 + expected));
  }
}

// The default prefetch keeps 2 batches per worker, as DataLoader's prefetch_factor=2 does,
// within 128 MiB of batches and never under 2; an explicit prefetch is kept as given.
TEST(Loader, DefaultPrefetchIsTwoPerWorkerWithin128MiBOfBatchesAndAtLeastTwo) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(DefaultPrefetch(2, 2 * kMiB), 4);
  EXPECT_EQ(DefaultPrefetch(8, 2 * kMiB), 16);
  EXPECT_EQ(DefaultPrefetch(8, 16 * kMiB), 8);    // 128 MiB of 16 MiB batches
  EXPECT_EQ(DefaultPrefetch(2, 67 * kMiB), 2);    // batch 8192 of 8 KB rows: 4 would be 268 MB
  EXPECT_EQ(DefaultPrefetch(4, 1024 * kMiB), 2);  // at least 2
  EXPECT_EQ(DefaultPrefetch(1, 1024 * kMiB), 2);
  EXPECT_EQ(DefaultPrefetch(1, 1), 2);  // 2 per worker bounds it first
  EXPECT_EQ(DefaultPrefetch(0, 0), 2);

  // A loader whose batches are 48 MiB (48 rows of 1 MiB): 2 ready, not 2 * 2 workers.
  const int64_t rows = 48;
  const size_t row_bytes = kMiB;
  auto data = std::make_shared<std::vector<std::byte>>(rows * row_bytes, std::byte{7});
  const auto open = [&] {
    return OpenMemory(
        {{FieldSpec{"x", DType::kUInt8, {static_cast<int64_t>(row_bytes)}}, data->data(), rows}},
        data);
  };
  LoaderOptions o = Opts(rows);
  {
    Loader loader(open(), o);
    EXPECT_EQ(loader.stats().prefetch, 2);
    EXPECT_EQ(loader.options().prefetch, 2);
  }
  o.prefetch = 5;
  Loader asked(open(), o);
  EXPECT_EQ(asked.stats().prefetch, 5);
}

TEST(Loader, StatsCountWhatWasDelivered) {
  Data data(256);
  Loader loader(data.Open(), Opts(64));
  Epoch(loader);
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.batches, 4);
  EXPECT_EQ(s.samples, 256);
  EXPECT_EQ(s.bytes, 256 * (16 + 8));
  EXPECT_EQ(s.workers, 2);
  EXPECT_EQ(s.prefetch, 4);
  EXPECT_GT(s.read_ns, 0);
  const auto j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j.at("samples").get<int64_t>(), 256);
  EXPECT_TRUE(j.contains("consumer_wait_fraction"));
}

TEST(Loader, GpuBusyFractionIsNullWheneverItIsNoShare) {
  LoaderStats s;
  s.gpu_steps = 3;  // steps timed, yet no time measured (a clock too coarse)
  EXPECT_LT(s.GpuBusyFraction(), 0);
  EXPECT_TRUE(nlohmann::json::parse(s.ToJson()).at("gpu_busy_fraction").is_null());
  s.gpu_busy_ns = 3;
  s.gpu_idle_ns = 1;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(s.ToJson()).at("gpu_busy_fraction").get<double>(), 0.75);
}

TEST(Loader, EmptyEpochEndsAtOnce) {
  Data data(5);
  LoaderOptions o = Opts(10);
  o.drop_last = true;
  Loader loader(data.Open(), o);
  EXPECT_EQ(loader.batches_per_epoch(), 0);
  EXPECT_EQ(loader.Next(), nullptr);
  EXPECT_EQ(loader.Next(), nullptr);
}

// A host device that pretends to need a copy, so the staging path (pinned buffer, copy,
// fence-guarded release) runs without a GPU.
class StagingHostDevice : public Device {
 public:
  DeviceType type() const override { return DeviceType::kCpu; }
  int ordinal() const override { return 0; }
  std::string name() const override { return "staging-cpu"; }
  bool needs_copy() const override { return true; }
  void* AllocHost(size_t n) override { return HostDevice()->AllocHost(n); }
  void FreeHost(void* p) noexcept override { HostDevice()->FreeHost(p); }
  void* AllocDevice(size_t n) override { return HostDevice()->AllocDevice(n); }
  void FreeDevice(void* p) noexcept override { HostDevice()->FreeDevice(p); }
  std::unique_ptr<DeviceStream> NewStream() override { return HostDevice()->NewStream(); }
  std::shared_ptr<DeviceEvent> RecordOn(uintptr_t) override { return nullptr; }
  DeviceMemoryInfo MemoryInfo() override { return HostDevice()->MemoryInfo(); }
};

TEST(Loader, StagedCopyPathDeliversTheSameBatches) {
  Data data(400);
  Loader direct(data.Open(), Opts(32));
  LoaderOptions o = Opts(32);
  o.device = std::make_shared<StagingHostDevice>();
  Loader staged(data.Open(), o);
  EXPECT_EQ(Epoch(direct), Epoch(staged));
  EXPECT_EQ(staged.stats().device, "staging-cpu");
}

}  // namespace
}  // namespace gpufeed

namespace gpufeed {
namespace {

TEST(Loader, SetParallelismKeepsTheBatchesAndRecordsTimings) {
  Data data(600);
  Loader reference(data.Open(), Opts(20, 1));
  LoaderOptions o = Opts(20, 1);
  o.max_workers = 4;
  o.max_prefetch = 6;
  Loader tuned(data.Open(), o);
  std::vector<std::vector<int64_t>> got;
  int n = 0;
  while (auto batch = tuned.Next()) {
    if (++n == 5) tuned.SetParallelism(4, 6);
    if (n == 20) tuned.SetParallelism(2, 1);
    got.push_back(CheckedLabels(*batch));
  }
  EXPECT_EQ(got, Epoch(reference));
  EXPECT_EQ(tuned.workers(), 2);
  EXPECT_EQ(tuned.prefetch(), 1);
  tuned.SetParallelism(99, 99);  // clamped to the maxima
  EXPECT_EQ(tuned.workers(), 4);
  EXPECT_EQ(tuned.prefetch(), 6);
  const auto timings = tuned.RecentBatches(1000);
  ASSERT_EQ(timings.size(), 30u);  // every batch of the epoch, its step closed by Next()
  EXPECT_EQ(timings.front().batch, 0);
  EXPECT_EQ(timings.back().batch, 29);
  EXPECT_EQ(timings[2].workers, 1);
  EXPECT_EQ(timings[10].workers, 4);
  for (const auto& t : timings) EXPECT_GT(t.read_ns, 0);
}

TEST(Loader, DefaultWorkersAndPrefetchStartWithinTheGivenMaxima) {
  // The default (min(4, CPUs) workers, 2 per worker prefetched) must not start above a
  // max_workers / max_prefetch the caller set, whatever the machine's CPU count.
  Data data(200);
  LoaderOptions o = Opts(20, 0);
  o.autotune = true;
  o.max_workers = 1;
  o.max_prefetch = 1;
  Loader loader(data.Open(), o);
  EXPECT_EQ(loader.workers(), 1);
  EXPECT_EQ(loader.prefetch(), 1);
  EXPECT_EQ(loader.options().max_workers, 1);
  // An explicit setting above its max raises the max.
  LoaderOptions explicit_workers = Opts(20, 3);
  explicit_workers.max_workers = 1;
  Loader raised(data.Open(), explicit_workers);
  EXPECT_EQ(raised.workers(), 3);
  EXPECT_EQ(raised.options().max_workers, 3);
}

// A source that reads ahead: it records every hint (the samples of a later batch).
class HintRecorder : public TestSource {
 public:
  using TestSource::TestSource;
  bool ReadsAhead() const override { return true; }
  int64_t ReadAheadSamples() const override { return ahead_samples; }
  void ReadAhead(std::span<const int64_t> indices, SourceWorkerState*) const override {
    MutexLock lock(&mu);
    hints.emplace_back(indices.begin(), indices.end());
  }
  int64_t ahead_samples = 0;
  mutable Mutex mu;
  mutable std::vector<std::vector<int64_t>> hints GUARDED_BY(mu);
};

TEST(Loader, ReadAheadHintsReachIntoTheNextEpoch) {
  // Near an epoch's end the hints name the next epoch's first batches, so a remote source
  // fetches them ahead instead of in a burst when the epoch turns.
  Data data(200);
  auto source = std::make_shared<HintRecorder>(data.Open());
  LoaderOptions o = Opts(20, 1);
  o.prefetch = 1;
  o.shuffle = true;
  Loader loader(source, o);
  const auto first = Epoch(loader);
  const auto second = Epoch(loader);
  ASSERT_EQ(first.size(), 10u);
  ASSERT_NE(first, second);  // shuffled again: epoch 1's batches are its own
  MutexLock lock(&source->mu);
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_NE(std::find(source->hints.begin(), source->hints.end(), second[b]),
              source->hints.end())
        << "epoch 1's batch " << b << " was never hinted";
  }
}

TEST(Loader, ReadAheadHintsReachAsFarAsTheSourceAsksEachBatchOnce) {
  // A source that asks for 5 batches' worth of samples ahead (a remote store taking many
  // requests at once) is hinted that far beyond the claimed batch from the first claim on:
  // every later batch of the epoch once, none twice, so that its fetches are out together
  // instead of one per claim.
  Data data(200);
  auto source = std::make_shared<HintRecorder>(data.Open());
  source->ahead_samples = 100;  // batches of 20
  LoaderOptions o = Opts(20, 1);
  o.prefetch = 1;
  o.shuffle = false;
  Loader loader(source, o);
  ASSERT_EQ(Epoch(loader).size(), 10u);
  MutexLock lock(&source->mu);
  std::vector<int64_t> firsts;  // the first sample of each hinted batch of epoch 0
  for (const auto& hint : source->hints) {
    ASSERT_EQ(hint.size(), 20u);
    firsts.push_back(hint.front());
  }
  // The first claim (batch 0) hints batches 1..7: 1 worker + 1 prefetched, then 5 more.
  ASSERT_GE(firsts.size(), 7u);
  for (int64_t b = 1; b <= 7; ++b) EXPECT_EQ(firsts[static_cast<size_t>(b - 1)], b * 20);
  // Then each batch once, into the next epoch's first ones (unshuffled: the same samples).
  for (size_t i = 0; i < std::min<size_t>(firsts.size(), 9); ++i) {
    EXPECT_EQ(firsts[i], static_cast<int64_t>(i + 1) * 20) << "hint " << i;
  }
}

}  // namespace
}  // namespace gpufeed
