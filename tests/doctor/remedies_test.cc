// The loader takes the doctor's safe advice itself: a loop waiting on reads gets its data set
// copied in the background, once, recorded with its evidence; a loop that does not wait on
// reads gets nothing done to it.
#include "gpufeed/remedies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "gpufeed/cache.h"
#include "loader_test_util.h"

namespace gpufeed {
namespace {

using loader_test::Data;
using loader_test::Opts;
using loader_test::TestSource;
using ::testing::HasSubstr;

Diagnosis Waiting(Verdict verdict, Stage stage, double wait, double read_share) {
  Diagnosis d;
  d.verdict = verdict;
  d.stage = stage;
  d.consumer_wait_fraction = wait;
  d.wait_path = {{"queued", 0}, {"read", read_share}, {"transform", 1 - read_share}};
  return d;
}

TEST(CacheRemedyEvidence, ReadBoundLoopGetsACopyWithItsFigures) {
  const auto evidence =
      CacheRemedyEvidence(Waiting(Verdict::kInputBound, Stage::kRead, 0.94, 0.98));
  ASSERT_TRUE(evidence);
  EXPECT_EQ(*evidence, "read-bound: the loop waited 94% of its time, 98% of the wait on reads");
  const auto remote = CacheRemedyEvidence(Waiting(Verdict::kCpuStarved, Stage::kRemote, 0.5, 0.9));
  ASSERT_TRUE(remote);
  EXPECT_THAT(*remote, HasSubstr("from an object store"));
}

TEST(CacheRemedyEvidence, OtherBottlenecksGetNoCopy) {
  EXPECT_FALSE(CacheRemedyEvidence(Waiting(Verdict::kHealthy, Stage::kNone, 0.01, 1)));
  EXPECT_FALSE(CacheRemedyEvidence(Waiting(Verdict::kInputBound, Stage::kTransform, 0.9, 0.1)));
  EXPECT_FALSE(CacheRemedyEvidence(Waiting(Verdict::kCopyBound, Stage::kCopy, 0.9, 0)));
  EXPECT_FALSE(CacheRemedyEvidence(Waiting(Verdict::kMeasuring, Stage::kRead, 0.9, 1)));
  // Waiting little: a copy of the data set is not worth its memory.
  EXPECT_FALSE(CacheRemedyEvidence(Waiting(Verdict::kInputBound, Stage::kRead, 0.05, 1)));
  // Read named, but most of the wait elsewhere.
  EXPECT_FALSE(CacheRemedyEvidence(Waiting(Verdict::kInputBound, Stage::kRead, 0.9, 0.3)));
}

TEST(Remedies, ReadBoundLoaderStartsOneCopyAndRecordsIt) {
  Data data(4096);
  auto source = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/15);
  Loader loader(source, Opts(8, 1));
  int started = 0;
  AttachRemedies(loader, {.start_cache = [&](std::string*) {
                   ++started;
                   return std::string("a RAM copy of 1 MB");
                 }});
  int batches = 0;
  while (auto batch = loader.Next()) {
    loader_test::CheckedLabels(*batch);
    if (++batches == 150) break;
  }
  EXPECT_EQ(started, 1);
  const LoaderStats stats = loader.stats();
  ASSERT_EQ(stats.actions.size(), 1u);
  EXPECT_THAT(stats.actions[0], HasSubstr("the loop waited"));
  EXPECT_THAT(stats.actions[0], HasSubstr("building a RAM copy of 1 MB in the background"));
}

TEST(Remedies, RefusedCopyIsTriedOnceAndNotRecorded) {
  Data data(4096);
  auto source = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/15);
  Loader loader(source, Opts(8, 1));
  int asked = 0;
  AttachRemedies(loader, {.start_cache = [&](std::string* why) {
                   ++asked;
                   *why = "1 MB does not fit the RAM budget 0 B";
                   return std::string();
                 }});
  for (int i = 0; i < 150; ++i) ASSERT_TRUE(loader.Next());
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(loader.stats().actions.empty());
}

TEST(Remedies, StepBoundLoaderIsLeftAlone) {
  Data data(4096);
  Loader loader(data.Open(), Opts(8, 2));
  int started = 0;
  AttachRemedies(loader, {.start_cache = [&](std::string*) {
                   ++started;
                   return std::string("a copy");
                 }});
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(loader.Next());
    std::this_thread::sleep_for(std::chrono::milliseconds(8));  // the step dominates
  }
  EXPECT_EQ(started, 0);
  EXPECT_TRUE(loader.stats().actions.empty());
}

// The loader's own epochs, as label lists per batch.
std::vector<std::vector<int64_t>> Epochs(Loader& loader, int epochs) {
  std::vector<std::vector<int64_t>> out;
  for (int e = 0; e < epochs; ++e) {
    for (auto& batch : loader_test::Epoch(loader)) out.push_back(std::move(batch));
  }
  return out;
}

CachedLoaderOptions Healing(int64_t batch, uint64_t ram_budget = 0) {
  CachedLoaderOptions o;
  o.loader = Opts(batch, 1);
  o.device = "cpu";
  o.remedies = true;
  o.cache.ram_budget_bytes = ram_budget;
  o.cache.verbose = false;
  return o;
}

// The whole chain: a read-bound loop gets its set copied into RAM mid-epoch, and every epoch
// gives the batches an untouched loader gives (the same rows, the same order).
TEST(Remedies, CopyMidEpochKeepsEveryBatch) {
  Data data(2048);
  auto slow = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/10);
  CachedLoader healed = OpenCachedLoader(slow, Healing(8));
  Loader& loader = *healed.loader;
  AttachRemedies(loader, {.start_cache = [&loader](std::string* why) {
                   return StartCacheWhileRunning(loader.source(), why);
                 }});
  const auto got = Epochs(loader, 2);
  Loader plain(data.Open(), Opts(8, 1));
  EXPECT_EQ(got, Epochs(plain, 2));
  EXPECT_EQ(loader.source().cache_tier(), CacheTier::kRam);
  const LoaderStats stats = loader.stats();
  ASSERT_EQ(stats.actions.size(), 1u);
  EXPECT_THAT(stats.actions[0], HasSubstr("building a RAM copy (49 KB fits the RAM budget"));
  // Reads moved to the copy: the second epoch read the slow source far less than once per
  // batch (the RAM tier fills on first touch, so rows the first epoch did not reach after
  // the switch are read once more).
  EXPECT_LT(slow->reads.load(), 2 * 256);
}

TEST(Remedies, CopyThatDoesNotFitIsRefusedWithTheBudget) {
  Data data(2048);
  auto slow = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/10);
  CachedLoader healed = OpenCachedLoader(slow, Healing(8, /*ram_budget=*/1024));
  std::string why;
  EXPECT_EQ(StartCacheWhileRunning(healed.loader->source(), &why), "");
  EXPECT_THAT(why, HasSubstr("budget"));
  EXPECT_EQ(StartCacheWhileRunning(healed.loader->source(), &why), "");
  EXPECT_THAT(why, HasSubstr("started before"));
  EXPECT_EQ(healed.loader->source().cache_tier(), CacheTier::kNone);
  Loader plain(data.Open(), Opts(8, 1));
  EXPECT_EQ(Epochs(*healed.loader, 1), Epochs(plain, 1));
}

TEST(Remedies, LoaderOpenedWithoutRemediesCannotStartACopy) {
  Data data(64);
  CachedLoaderOptions o = Healing(8);
  o.remedies = false;
  CachedLoader opened = OpenCachedLoader(data.Open(), o);
  std::string why;
  EXPECT_EQ(StartCacheWhileRunning(opened.loader->source(), &why), "");
  EXPECT_THAT(why, HasSubstr("remedies"));
}

// A source whose rows differ per read (as an image source's random crops do).
class DrawingSource final : public TestSource {
 public:
  using TestSource::TestSource;
  bool rows_repeat() const override { return false; }
};

TEST(Remedies, SourceThatDrawsPerReadIsNeverCopied) {
  Data data(64);
  auto drawing = std::make_shared<DrawingSource>(data.Open());
  CachedLoader opened = OpenCachedLoader(drawing, Healing(8));
  std::string why;
  EXPECT_EQ(StartCacheWhileRunning(opened.loader->source(), &why), "");
  try {
    OpenCached(drawing, {.tier = CacheTier::kRam, .verbose = false});
    ADD_FAILURE() << "a copy of rows drawn per read was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("freeze one draw"));
  }
}

}  // namespace
}  // namespace gpufeed
