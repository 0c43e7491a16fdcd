// The loader takes the doctor's safe advice itself: a loop waiting on reads gets its data set
// copied in the background, once, recorded with its evidence; a loop that does not wait on
// reads gets nothing done to it.
#include "gpufeed/remedies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "gpufeed/cache.h"
#include "gpufeed/cache_remedy.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/open_loader.h"
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

// The loader `recipe` assembles over `source`.
OpenedLoader Open(std::shared_ptr<Source> source, LoaderRecipe recipe) {
  recipe.source = std::move(source);
  return OpenLoader(std::move(recipe));
}

LoaderRecipe Healing(int64_t batch, uint64_t ram_budget = 0) {
  LoaderRecipe o;
  o.loader = Opts(batch, 1);
  o.device = "cpu";
  o.remedies = true;
  o.cache.ram_budget_bytes = ram_budget;
  o.cache.verbose = false;
  return o;
}

// The whole chain: a read-bound loop gets its set copied into RAM mid-epoch, and every epoch
// gives the batches an untouched loader gives (the same rows, the same order), shuffled and
// sharded (rank 1 of 2).
TEST(Remedies, CopyMidEpochKeepsEveryBatch) {
  Data data(4096);
  auto slow = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/10);
  LoaderRecipe options = Healing(8);
  options.loader.shuffle = true;
  options.loader.rank = 1;
  options.loader.world_size = 2;
  OpenedLoader healed = Open(slow, options);  // attaches the remedies (LoaderRecipe::remedies)
  Loader& loader = *healed.loader;
  const auto got = Epochs(loader, 2);
  LoaderOptions plain_options = Opts(8, 1);
  plain_options.shuffle = true;
  plain_options.rank = 1;
  plain_options.world_size = 2;
  Loader plain(data.Open(), plain_options);
  EXPECT_EQ(got, Epochs(plain, 2));
  const LoaderStats stats = loader.stats();
  ASSERT_EQ(stats.actions.size(), 1u);
  EXPECT_THAT(stats.actions[0], HasSubstr("building a RAM copy (98 KB fits the RAM budget"));
  // The copy fills on a low-priority thread (rows it has not reached yet are read from the
  // source): once it is complete an epoch reads nothing from the slow source, and every epoch
  // still gives the same batches. (The bound only keeps a broken fill from hanging the test.)
  bool quiet = false;
  for (int e = 0; e < 40 && !quiet; ++e) {
    const int before = slow->reads.load();
    EXPECT_EQ(Epochs(loader, 1), Epochs(plain, 1));
    quiet = slow->reads.load() == before;
  }
  EXPECT_TRUE(quiet);
  EXPECT_EQ(loader.source().cache_tier(), CacheTier::kRam);
  // The loader's stats say so: the copy serves, made whole while the loader ran.
  EXPECT_EQ(loader.stats().source.cache_tier, CacheTier::kRam);
  EXPECT_EQ(loader.stats().source.cache_built_fraction, 1.0);
}

TEST(Remedies, CopyThatDoesNotFitIsRefusedWithTheBudget) {
  Data data(2048);
  auto slow = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/10);
  OpenedLoader healed = Open(slow, Healing(8, /*ram_budget=*/1024));
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
  LoaderRecipe o = Healing(8);
  o.remedies = false;
  OpenedLoader opened = Open(data.Open(), o);
  std::string why;
  EXPECT_EQ(StartCacheWhileRunning(opened.loader->source(), &why), "");
  EXPECT_THAT(why, HasSubstr("remedies"));
  // Nor does a loader whose user asked for a cache: its source stays as given.
  const RemedyOptions none = DefaultRemedies(*opened.loader);
  EXPECT_FALSE(none.start_cache);
  EXPECT_FALSE(none.grow_chunk_cache);
  o.remedies = true;
  o.cache.tier = CacheTier::kRam;
  OpenedLoader cached = Open(data.Open(), o);
  EXPECT_FALSE(DefaultRemedies(*cached.loader).start_cache);
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
  OpenedLoader opened = Open(drawing, Healing(8));
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

// A gzip-compressed HDF5 file as h5py writes one: `n` samples of float32[64], chunks of 16
// samples; x[i][e] = i * 64 + e.
std::string WriteGzipFile(int64_t n) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("remedies_" + std::to_string(getpid()) + ".h5"))
          .string();
  std::vector<float> x(static_cast<size_t>(n * 64));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {static_cast<hsize_t>(n), 64};
  const hsize_t chunk[2] = {16, 64};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  H5Pset_deflate(dcpl, 4);
  const hid_t set = H5Dcreate2(file, "x", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
  H5Dclose(set);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
  return path;
}

TEST(Remedies, ChunkCacheGrowsTowardTheDecodedSetAndNeverShrinks) {
  const std::string path = WriteGzipFile(2048);
  auto source = OpenHdf5({path}, {"x"}, {.chunk_cache_bytes = 4096});
  EXPECT_EQ(Hdf5ChunkCacheOf(*source).budget, 4096u);
  EXPECT_EQ(Hdf5ChunkCacheOf(*source).decoded_bytes, 2048u * 64 * 4);  // 128 chunks of 4 KiB
  LoaderRecipe o = Healing(8, /*ram_budget=*/1024);                    // no copy fits
  OpenedLoader opened = Open(source, o);
  const RemedyOptions remedies = DefaultRemedies(*opened.loader);
  std::string why;
  EXPECT_EQ(remedies.start_cache(&why), "");
  EXPECT_THAT(why, HasSubstr("budget"));
  const std::string grown = remedies.grow_chunk_cache(&why);
  EXPECT_THAT(grown, HasSubstr("raised the decoded-chunk cache from 4.1 KB to 524 KB"));
  EXPECT_EQ(Hdf5ChunkCacheOf(*source).budget, 2048u * 64 * 4);
  EXPECT_EQ(opened.loader->source().chunking().cache_bytes, 2048 * 64 * 4);
  // Nothing more to reach: refused with the reason; a smaller budget never lowers it.
  EXPECT_EQ(remedies.grow_chunk_cache(&why), "");
  EXPECT_THAT(why, HasSubstr("already holds"));
  EXPECT_EQ(GrowHdf5ChunkCache(*source, 1024), 2048u * 64 * 4);
  // The batches are the file's (the cache changes only how often a chunk is decoded).
  for (int i = 0; i < 20; ++i) {
    auto batch = opened.loader->Next();
    ASSERT_TRUE(batch);
    const auto x = batch->field("x");
    for (int64_t r = 0; r < batch->size(); ++r) {
      const int64_t row = batch->indices()[static_cast<size_t>(r)];
      EXPECT_EQ(x.as<float>()[r * 64 + 5], static_cast<float>(row * 64 + 5));
    }
  }
  std::filesystem::remove(path);
}

TEST(Remedies, ChunkCacheIsNotGrownForOtherSources) {
  Data data(64);
  // Read through a TestSource: arrays in memory alone are never copied (copy_speeds_reads).
  OpenedLoader opened = Open(std::make_shared<TestSource>(data.Open()), Healing(8));
  std::string why;
  EXPECT_EQ(DefaultRemedies(*opened.loader).grow_chunk_cache(&why), "");
  EXPECT_THAT(why, HasSubstr("no compressed HDF5 chunks"));
}

// When no copy can be made, the larger chunk cache is the remedy recorded.
TEST(Remedies, RefusedCopyFallsBackToTheChunkCache) {
  Data data(4096);
  auto slow = std::make_shared<TestSource>(data.Open(), -1, /*delay_ms=*/15);
  Loader loader(slow, Opts(8, 1));
  int grown = 0;
  AttachRemedies(loader, {.start_cache =
                              [](std::string* why) {
                                *why = "1 MB does not fit the RAM budget 0 B";
                                return std::string();
                              },
                          .grow_chunk_cache =
                              [&](std::string*) {
                                ++grown;
                                return std::string("raised the decoded-chunk cache");
                              }});
  for (int i = 0; i < 150; ++i) ASSERT_TRUE(loader.Next());
  EXPECT_EQ(grown, 1);
  const LoaderStats stats = loader.stats();
  ASSERT_EQ(stats.actions.size(), 1u);
  EXPECT_THAT(stats.actions[0], HasSubstr("the loop waited"));
  EXPECT_THAT(stats.actions[0], HasSubstr("raised the decoded-chunk cache"));
}

}  // namespace
}  // namespace gpufeed
