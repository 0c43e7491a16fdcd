// Caches made in the background (CacheOptions::background): OpenCached returns while the copy
// is not there yet, reads come from the source until the copy is complete and from the copy
// after, an epoch that spans the switch is exactly the uncached epoch, a second opener streams
// while another builds and maps what it publishes, destroying the source stops the filler, and
// a failed fill is raised by the next read.
//
// The fills are held by a source whose large reads (a build's or a preload's: thousands of rows
// at once; the loader asks for 16) wait until the test lets them go or the filler is cancelled.
// Nothing here depends on timing: every wait is for an event, bounded only to fail instead of
// hanging.
#include "cache/background_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_test_util.h"
#include "cache/shm/shm_open.h"
#include "error_code_of.h"
#include "gpufeed/cache.h"
#include "gpufeed/cancel.h"
#include "gpufeed/loader.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using testing::Names;
using testing::ReadAll;
using testing::ScratchDir;

constexpr int64_t kSamples = 2000;
constexpr int64_t kFillRows = 256;  // reads this large are a fill's

std::shared_ptr<Source> Synthetic() {
  return OpenSynthetic(ParseSchema("x:float32[64],label:int64[]"), kSamples, 5);
}

// Holds a fill: reads of kFillRows rows or more wait while `hold` (until their thread's token
// is cancelled), or throw when `fail_fill`. Counts the loader's (small) reads.
class HeldFill : public Source {
 public:
  explicit HeldFill(std::shared_ptr<Source> base) : base_(std::move(base)) {}
  const Schema& schema() const override { return base_->schema(); }
  int64_t size() const override { return base_->size(); }
  std::string Describe() const override { return "held " + base_->Describe(); }
  std::string Identity() const override { return base_->Identity(); }
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    if (static_cast<int64_t>(indices.size()) < kFillRows) {
      small_reads.fetch_add(1);
    } else {
      fill_reads.fetch_add(1);
      if (fail_fill.load()) {
        throw Error(ErrorCode::kCorruptData, "held: sample 7 of field 'x' is damaged");
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (hold.load() && !CancelRequested() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (CancelRequested()) fill_reads_cancelled.fetch_add(1);
    }
    base_->Read(indices, out, state);
  }

  std::atomic<bool> hold{true};
  std::atomic<bool> fail_fill{false};
  mutable std::atomic<int> small_reads{0};
  mutable std::atomic<int> fill_reads{0};
  mutable std::atomic<int> fill_reads_cancelled{0};

 private:
  std::shared_ptr<Source> base_;
};

CacheOptions Background(const std::string& dir, CacheTier tier = CacheTier::kShm) {
  return {.tier = tier, .preload = true, .shm_dir = dir, .threads = 2, .verbose = false};
}

void WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(done());
}

std::vector<std::byte> Bytes(const Batch& batch) {
  std::vector<std::byte> bytes;
  for (int f = 0; f < static_cast<int>(batch.schema().fields.size()); ++f) {
    const FieldView view = batch.field(f);
    const auto* p = static_cast<const std::byte*>(view.data);
    bytes.insert(bytes.end(), p, p + view.bytes());
  }
  return bytes;
}

LoaderOptions Shuffled() {
  return {.batch_size = 16,
          .shuffle = true,
          .seed = 77,
          .rank = 1,
          .world_size = 2,
          .workers = 2,
          .prefetch = 2};
}

TEST(BackgroundCacheTest, AnEpochAcrossTheSwitchIsTheUncachedEpoch) {
  ScratchDir dir;
  auto held = std::make_shared<HeldFill>(Synthetic());
  CacheInfo info;
  auto cached = OpenCached(held, Background(dir.path()), &info);
  auto* background = dynamic_cast<BackgroundCachedSource*>(cached.get());
  ASSERT_NE(background, nullptr);
  ASSERT_NE(info.progress, nullptr);
  EXPECT_EQ(info.tier, CacheTier::kShm);
  EXPECT_NE(info.reason.find("streaming from the source until it is complete"), std::string::npos)
      << info.reason;
  EXPECT_EQ(cached->cache_tier(), CacheTier::kNone);

  Loader reference(Synthetic(), Shuffled());
  Loader loader(cached, Shuffled());
  const int64_t batches = loader.batches_per_epoch();
  ASSERT_GT(batches, 40);
  int64_t taken = 0;
  for (; taken < 10; ++taken) {  // streamed: the fill is held
    auto batch = loader.Next();
    auto expected = reference.Next();
    ASSERT_TRUE(batch && expected);
    EXPECT_EQ(Bytes(*batch), Bytes(*expected)) << "batch " << taken;
  }
  EXPECT_FALSE(background->switched());
  EXPECT_LT(info.progress->Get().built_fraction, 1.0);
  held->hold = false;
  ASSERT_TRUE(background->WaitForFill(120));
  ASSERT_TRUE(background->switched());
  const int streamed = held->small_reads.load();
  for (; auto batch = loader.Next(); ++taken) {
    auto expected = reference.Next();
    ASSERT_TRUE(expected);
    EXPECT_EQ(Bytes(*batch), Bytes(*expected)) << "batch " << taken;
  }
  EXPECT_EQ(reference.Next(), nullptr);
  EXPECT_EQ(taken, batches);
  // The batches after the switch came from the copy: the source was not read again.
  EXPECT_EQ(held->small_reads.load(), streamed);
  EXPECT_LT(streamed, batches);
  const CacheProgress::Snapshot done = info.progress->Get();
  EXPECT_TRUE(done.done);
  EXPECT_EQ(done.tier, CacheTier::kShm);
  EXPECT_EQ(done.built_fraction, 1.0);
  EXPECT_EQ(cached->cache_tier(), CacheTier::kShm);
  EXPECT_EQ(Names(dir.path()),
            (std::vector<std::string>{"gpufeed-" + info.key, "gpufeed-" + info.key + ".lock"}));
}

TEST(BackgroundCacheTest, ASecondOpenerStreamsWhileAnotherBuildsAndMapsWhatItPublishes) {
  ScratchDir dir;
  auto builder_source = std::make_shared<HeldFill>(Synthetic());
  CacheInfo builder_info;
  auto builder = OpenCached(builder_source, Background(dir.path()), &builder_info);
  WaitFor([&] { return builder_source->fill_reads.load() > 0; });  // it holds the lock now

  // A second opener (its own descriptor of the lock, as another process's): never blocks.
  auto second_source = std::make_shared<HeldFill>(Synthetic());
  second_source->hold = false;
  CacheInfo info;
  auto second = OpenCached(second_source, Background(dir.path()), &info);
  auto* background = dynamic_cast<BackgroundCachedSource*>(second.get());
  ASSERT_NE(background, nullptr);
  WaitFor([&] {
    return info.progress->Get().reason.find("another process is building") != std::string::npos;
  });
  EXPECT_EQ(ReadAll(*second), ReadAll(*Synthetic()));  // streamed meanwhile
  EXPECT_FALSE(background->switched());

  builder_source->hold = false;
  ASSERT_TRUE(background->WaitForFill(120));
  EXPECT_TRUE(background->switched());
  EXPECT_EQ(second_source->fill_reads.load(), 0);  // it built nothing
  const CacheProgress::Snapshot done = info.progress->Get();
  EXPECT_EQ(done.tier, CacheTier::kShm);
  EXPECT_NE(done.reason.find("another process built it"), std::string::npos) << done.reason;
  const int streamed = second_source->small_reads.load();
  EXPECT_EQ(ReadAll(*second), ReadAll(*Synthetic()));
  EXPECT_EQ(second_source->small_reads.load(), streamed);  // read from the copy
  EXPECT_EQ(Names(dir.path()),
            (std::vector<std::string>{"gpufeed-" + info.key, "gpufeed-" + info.key + ".lock"}));
}

TEST(BackgroundCacheTest, DestroyingTheSourceStopsTheBuildAndPublishesNothing) {
  ScratchDir dir;
  auto held = std::make_shared<HeldFill>(Synthetic());
  CacheInfo info;
  auto cached = OpenCached(held, Background(dir.path()), &info);
  WaitFor([&] { return held->fill_reads.load() > 0; });
  EXPECT_EQ(ReadAll(*cached), ReadAll(*Synthetic()));
  // `gpufeed cache ls` lists the build in progress: a tmp file whose builder is alive.
  const std::vector<ShmCacheEntry> listed = ListShmCaches(dir.path());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_NE(listed[0].path.find(".tmp-"), std::string::npos) << listed[0].path;
  EXPECT_FALSE(listed[0].half_built);
  EXPECT_LT(listed[0].built_share, 1.0);
  cached.reset();  // joins the filler
  EXPECT_EQ(held->fill_reads_cancelled.load(), held->fill_reads.load());
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"gpufeed-" + info.key + ".lock"});
  const CacheProgress::Snapshot stopped = info.progress->Get();
  EXPECT_TRUE(stopped.done);
  EXPECT_EQ(stopped.tier, CacheTier::kNone);
  EXPECT_TRUE(stopped.error.empty()) << stopped.error;
  // The lock was released: the next open builds the cache.
  auto next = OpenCached(Synthetic(), Background(dir.path()), &info);
  ASSERT_TRUE(dynamic_cast<BackgroundCachedSource&>(*next).WaitForFill(120));
  EXPECT_EQ(info.progress->Get().tier, CacheTier::kShm);
}

TEST(BackgroundCacheTest, AFailedBuildIsRaisedByTheNextReadAndPublishesNothing) {
  ScratchDir dir;
  auto held = std::make_shared<HeldFill>(Synthetic());
  held->fail_fill = true;
  CacheInfo info;
  auto cached = OpenCached(held, Background(dir.path()), &info);
  ASSERT_TRUE(dynamic_cast<BackgroundCachedSource&>(*cached).WaitForFill(120));
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ReadAll(*cached); }, &message), ErrorCode::kCorruptData);
  EXPECT_NE(message.find("in the background failed"), std::string::npos) << message;
  EXPECT_NE(message.find("sample 7 of field 'x'"), std::string::npos) << message;
  const CacheProgress::Snapshot failed = info.progress->Get();
  EXPECT_TRUE(failed.done);
  EXPECT_NE(failed.error.find("sample 7"), std::string::npos) << failed.error;
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"gpufeed-" + info.key + ".lock"});

  // Through a loader: the error is the loader's on its next batch.
  auto failing = OpenCached(held, Background(dir.path()));
  ASSERT_TRUE(dynamic_cast<BackgroundCachedSource&>(*failing).WaitForFill(120));
  Loader loader(failing, Shuffled());
  EXPECT_EQ(ErrorCodeOf([&] {
              while (loader.Next()) {
              }
            }),
            ErrorCode::kCorruptData);
}

TEST(BackgroundCacheTest, ARamPreloadFillsInTheBackgroundWhileReadsAreServed) {
  ScratchDir dir;
  auto held = std::make_shared<HeldFill>(Synthetic());
  CacheInfo info;
  auto cached = OpenCached(held, Background(dir.path(), CacheTier::kRam), &info);
  auto* background = dynamic_cast<BackgroundCachedSource*>(cached.get());
  ASSERT_NE(background, nullptr);
  EXPECT_EQ(cached->cache_tier(), CacheTier::kRam);
  WaitFor([&] { return held->fill_reads.load() > 0; });
  EXPECT_FALSE(info.progress->Get().done);
  EXPECT_EQ(ReadAll(*cached, 16), ReadAll(*Synthetic()));  // misses read from the source
  held->hold = false;
  ASSERT_TRUE(background->WaitForFill(120));
  EXPECT_EQ(info.progress->Get().built_fraction, 1.0);
  EXPECT_EQ(ReadAll(*cached, 16), ReadAll(*Synthetic()));
}

TEST(BackgroundCacheTest, AutoOnAColdCacheMeasuresAndDecidesInTheBackground) {
  ScratchDir dir;
  CacheInfo info;
  auto cached = OpenCached(Synthetic(), Background(dir.path(), CacheTier::kAuto), &info);
  auto* background = dynamic_cast<BackgroundCachedSource*>(cached.get());
  ASSERT_NE(background, nullptr);
  EXPECT_EQ(info.tier, CacheTier::kNone);  // nothing chosen yet
  EXPECT_NE(info.reason.find("measuring in the background"), std::string::npos) << info.reason;
  EXPECT_EQ(ReadAll(*cached), ReadAll(*Synthetic()));
  ASSERT_TRUE(background->WaitForFill(120));
  const CacheProgress::Snapshot done = info.progress->Get();
  EXPECT_NE(done.reason.find("measured: source"), std::string::npos) << done.reason;
  EXPECT_TRUE(done.error.empty()) << done.error;
  EXPECT_EQ(cached->cache_tier(), done.tier);
  EXPECT_EQ(background->switched(), done.tier != CacheTier::kNone);
  EXPECT_EQ(ReadAll(*cached), ReadAll(*Synthetic()));
}

// The probe reads the source in pieces of 512 rows (a fill's reads, held here): closing the
// loader stops it there.
TEST(BackgroundCacheTest, DestroyingTheSourceStopsAnAutoProbe) {
  ScratchDir dir;
  auto held = std::make_shared<HeldFill>(Synthetic());
  CacheInfo info;
  auto cached = OpenCached(held, Background(dir.path(), CacheTier::kAuto), &info);
  WaitFor([&] { return held->fill_reads.load() > 0; });
  cached.reset();
  EXPECT_EQ(held->fill_reads.load(), 1);
  EXPECT_EQ(held->fill_reads_cancelled.load(), 1);
  const CacheProgress::Snapshot stopped = info.progress->Get();
  EXPECT_TRUE(stopped.done);
  EXPECT_TRUE(stopped.error.empty()) << stopped.error;
}

TEST(BackgroundCacheTest, APublishedCacheServesAtOnceWithoutAFiller) {
  ScratchDir dir;
  CacheOptions options = Background(dir.path());
  options.background = false;
  CacheInfo built;
  OpenCached(Synthetic(), options, &built);
  ASSERT_TRUE(built.built);
  CacheInfo info;
  auto cached = OpenCached(Synthetic(), Background(dir.path(), CacheTier::kAuto), &info);
  EXPECT_EQ(info.tier, CacheTier::kShm);
  EXPECT_EQ(info.progress, nullptr);
  EXPECT_EQ(dynamic_cast<BackgroundCachedSource*>(cached.get()), nullptr);
}

}  // namespace
}  // namespace gpufeed
