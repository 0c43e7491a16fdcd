#include "pipeline/measure/autotuner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

// A batch as the loader would record it: `wait_ms` in Next(), `step_ms` of training step,
// `work_ms` of worker time, 100 rows.
BatchTiming Timing(int workers, int prefetch, double wait_ms, double step_ms, double work_ms) {
  BatchTiming t;
  t.rows = 100;
  t.workers = workers;
  t.prefetch = prefetch;
  t.consumer_wait_ns = static_cast<int64_t>(wait_ms * 1e6);
  t.step_ns = static_cast<int64_t>(step_ms * 1e6);
  t.read_ns = static_cast<int64_t>(work_ms * 1e6);
  return t;
}

// Feeds a window of identical batches (plus the batch skipped after a change).
std::optional<TuningChange> Window(Autotuner& tuner, const BatchTiming& t, int batches = 5) {
  std::optional<TuningChange> change;
  for (int i = 0; i < batches; ++i) {
    if (auto c = tuner.Observe(t)) change = c;
  }
  return change;
}

TEST(Autotuner, BusyWorkersGetAnotherWorkerAndAGainIsKept) {
  Autotuner tuner(4, 8);
  // 1 worker, busy all the time, consumer waits 80%: add a worker.
  auto c = Window(tuner, Timing(1, 1, 8, 2, 10));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->workers, 2);
  EXPECT_EQ(c->prefetch, 1);
  EXPECT_THAT(c->reason, HasSubstr("trying 2"));
  // Twice the throughput with 2 workers, still waiting: kept, and the climb goes on.
  c = Window(tuner, Timing(2, 1, 3, 2, 10));
  ASSERT_TRUE(c.has_value());
  EXPECT_THAT(c->reason, HasSubstr("kept workers 2"));
  EXPECT_EQ(c->workers, 3);
}

TEST(Autotuner, NoGainRevertsAndIsNotRetriedWhileTheLoadHolds) {
  Autotuner tuner(4, 8);
  auto c = Window(tuner, Timing(1, 1, 8, 2, 10));
  ASSERT_TRUE(c && c->workers == 2);
  c = Window(tuner, Timing(2, 1, 8, 2, 10));  // same throughput: the disk, not the CPU
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->workers, 1);
  EXPECT_THAT(c->reason, HasSubstr("back to 1"));
  // Still waiting, worker moves failed: deepen prefetch instead.
  c = Window(tuner, Timing(1, 1, 8, 2, 10));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->workers, 1);
  EXPECT_EQ(c->prefetch, 2);
  c = Window(tuner, Timing(1, 2, 8, 2, 10));  // no gain either: back, and settled
  ASSERT_TRUE(c && c->prefetch == 1);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(Window(tuner, Timing(1, 1, 8, 2, 10)).has_value());
}

TEST(Autotuner, AChangeOfLoadReopensFailedMoves) {
  Autotuner tuner(4, 8);
  Window(tuner, Timing(1, 1, 8, 2, 10));
  Window(tuner, Timing(2, 1, 8, 2, 10));  // reverted
  Window(tuner, Timing(1, 1, 8, 2, 10));  // prefetch trial
  Window(tuner, Timing(1, 2, 8, 2, 10));  // reverted: settled
  EXPECT_FALSE(Window(tuner, Timing(1, 1, 8, 2, 10)).has_value());
  // The source got three times slower per batch: the workers are the bottleneck now.
  auto c = Window(tuner, Timing(1, 1, 28, 2, 30));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->workers, 2);
}

TEST(Autotuner, KeepsQuietWhenTheLoaderKeepsUpAndStaysInLimits) {
  Autotuner tuner(2, 2);
  EXPECT_FALSE(Window(tuner, Timing(1, 1, 0.01, 10, 5)).has_value());
  Autotuner capped(1, 1);
  EXPECT_FALSE(Window(capped, Timing(1, 1, 8, 2, 10)).has_value());
}

TEST(Autotuner, LoaderFromABadStartAddsWorkersForASlowSource) {
  // A source whose reads sleep (a slow disk): more workers overlap the waits.
  class SlowSource : public Source {
   public:
    SlowSource() : base_(OpenSynthetic(ParseSchema("x:float32[4]"), 100000)) {}
    const Schema& schema() const override { return base_->schema(); }
    int64_t size() const override { return base_->size(); }
    std::string Describe() const override { return "slow"; }
    std::string Identity() const override { return "slow"; }
    void Read(std::span<const int64_t> i, const BatchView& out,
              SourceWorkerState* s) const override {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      base_->Read(i, out, s);
    }

   private:
    std::shared_ptr<Source> base_;
  };
  LoaderOptions o;
  o.batch_size = 16;
  o.workers = 1;
  o.prefetch = 1;
  o.autotune = true;
  o.max_workers = 4;
  o.rank = 0;
  o.world_size = 1;
  Loader loader(std::make_shared<SlowSource>(), o);
  for (int i = 0; i < 60; ++i) {
    auto b = loader.Next();
    ASSERT_NE(b, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(loader.workers(), 2);
  const auto stats = loader.stats();
  ASSERT_FALSE(stats.tuning_log.empty());
  EXPECT_THAT(stats.tuning_log.front(), HasSubstr("trying 2"));
  // The loader is no longer the wait it was: the last batches waited far less than a read.
  const auto recent = loader.RecentBatches(8);
  ASSERT_EQ(recent.size(), 8u);
  int64_t wait = 0;
  for (const auto& t : recent) wait += t.consumer_wait_ns;
  EXPECT_LT(wait / 8, 15'000'000);  // one worker alone waits ~19 ms
}

}  // namespace
}  // namespace gpufeed
