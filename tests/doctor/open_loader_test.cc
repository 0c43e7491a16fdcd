// OpenLoader: a recipe assembles a loader one way -- the data given once (a source or a path),
// the device and the transforms given once, the cache and the remedies in place -- and what the
// loader then meets is in its stats.
#include "gpufeed/open_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "gpufeed/cache_remedy.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/schema.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Source> Data() {
  return OpenSynthetic(ParseSchema("x:float32[4],label:int64"), 64, 1);
}

LoaderRecipe Recipe(std::shared_ptr<Source> source) {
  LoaderRecipe recipe;
  recipe.source = std::move(source);
  recipe.loader.batch_size = 16;
  recipe.device = "cpu";
  recipe.cache.verbose = false;
  return recipe;
}

// One epoch, batches dropped as they come.
void Drain(Loader& loader) {
  while (loader.Next()) {
  }
}

// The error `recipe` is refused with.
Error RefusalOf(LoaderRecipe recipe) {
  try {
    OpenLoader(std::move(recipe));
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "the recipe was accepted";
  return Error(ErrorCode::kIo, "accepted");
}

// Data whose own rows differ per read, cut from a store below it that it asks to be cached
// in `tier`, as an image source asks for its decoded images (gpufeed/cache.h, StoreBelow). It
// keeps the first copy handed back and counts the calls.
class AsksForItsStore final : public Source, public StoreBelow {
 public:
  explicit AsksForItsStore(CacheTier tier) : store_(Data()) {
    asked_.tier = tier;
    asked_.verbose = false;
  }
  const Schema& schema() const override { return store_->schema(); }
  int64_t size() const override { return store_->size(); }
  std::string Describe() const override { return "data asking for its store's copy"; }
  std::string Identity() const override { return "asks:" + store_->Identity(); }
  bool rows_repeat() const override { return false; }
  CacheTier cache_tier() const override { return Serving().cache_tier(); }
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* /*state*/) const override {
    Serving().Read(indices, out, nullptr);
  }
  void CacheStore(const MakeCopy& make_copy) const override {
    std::lock_guard lock(mu_);
    ++calls_;
    if (copy_ == nullptr) copy_ = make_copy(store_, asked_);
  }
  int calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  const Source& Serving() const {
    std::lock_guard lock(mu_);
    return copy_ != nullptr ? *copy_ : *store_;
  }
  const std::shared_ptr<Source> store_;
  CacheOptions asked_;
  mutable std::mutex mu_;
  mutable int calls_ = 0;
  mutable std::shared_ptr<Source> copy_;
};

// A gzip-compressed HDF5 file as h5py writes one: `n` samples of float32[16], chunks of 16
// samples.
std::string WriteGzipFile(int64_t n) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("open_loader_" + std::to_string(getpid()) + ".h5"))
          .string();
  std::vector<float> x(static_cast<size_t>(n * 16));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {static_cast<hsize_t>(n), 16};
  const hsize_t chunk[2] = {16, 16};
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

TEST(OpenLoader, TheDeviceAndTransformsGoWhereTheyAreGivenOnce) {
  LoaderRecipe recipe = Recipe(Data());
  recipe.transforms = {"cast:x:float16"};
  OpenedLoader out = OpenLoader(recipe);
  EXPECT_EQ(out.loader->options().device->name(), "cpu");
  EXPECT_EQ(out.loader->options().transforms.size(), 1u);
  EXPECT_EQ(out.cache.tier, CacheTier::kNone);
  EXPECT_EQ(out.cache.reason, "caching is off");
  EXPECT_EQ(&out.loader->source(), out.source.get());
}

TEST(OpenLoader, ASecondPlaceForTheDeviceOrTransformsIsRefused) {
  for (int which = 0; which < 3; ++which) {
    LoaderRecipe recipe = Recipe(Data());
    if (which == 0) recipe.loader.device = HostDevice();
    if (which == 1) recipe.cache.device = HostDevice();
    if (which == 2) recipe.loader.transforms = {ParseTransform("cast:x:float16")};
    const Error e = RefusalOf(recipe);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("LoaderRecipe::device"));
  }
}

TEST(OpenLoader, TheDataIsASourceOrAPathExactlyOnce) {
  LoaderRecipe neither = Recipe(nullptr);
  EXPECT_THAT(RefusalOf(neither).what(), HasSubstr("exactly one of the two"));
  LoaderRecipe both = Recipe(Data());
  both.path = "train.h5";
  EXPECT_THAT(RefusalOf(both).what(), HasSubstr("exactly one of the two"));
  LoaderRecipe fields = Recipe(Data());
  fields.fields = {"x"};
  EXPECT_THAT(RefusalOf(fields).what(), HasSubstr("go with a path"));
}

TEST(OpenLoader, APathIsOpenedWithItsFields) {
  const std::string path = WriteGzipFile(64);
  LoaderRecipe recipe = Recipe(nullptr);
  recipe.path = path;
  recipe.fields = {"x"};
  OpenedLoader out = OpenLoader(recipe);
  EXPECT_EQ(out.loader->schema().fields.size(), 1u);
  EXPECT_EQ(out.loader->samples_per_epoch(), 64);
  std::filesystem::remove(path);
}

TEST(OpenLoader, CacheOnlyMakesTheCopyWithoutALoader) {
  LoaderRecipe recipe = Recipe(Data());
  recipe.cache.tier = CacheTier::kRam;
  recipe.cache.preload = true;
  recipe.cache.background = false;
  recipe.remedies = true;
  recipe.cache_only = true;
  OpenedLoader out = OpenLoader(recipe);
  EXPECT_EQ(out.loader, nullptr);
  ASSERT_NE(out.source, nullptr);
  EXPECT_EQ(out.source->cache_tier(), CacheTier::kRam);
  EXPECT_EQ(out.cache.tier, CacheTier::kRam);
}

// The store below the data is cached where the loader is assembled, as the data asks; the
// loader reads the data itself, and the recipe's own cache stays off.
TEST(OpenLoader, TheStoreBelowTheDataIsCachedAsTheDataAsks) {
  auto data = std::make_shared<AsksForItsStore>(CacheTier::kRam);
  EXPECT_EQ(data->cache_tier(), CacheTier::kNone);
  OpenedLoader first = OpenLoader(Recipe(data));
  EXPECT_EQ(data->calls(), 1);
  EXPECT_EQ(data->cache_tier(), CacheTier::kRam);
  EXPECT_EQ(first.source, data);
  EXPECT_EQ(first.cache.tier, CacheTier::kNone);
  EXPECT_EQ(first.cache.reason, "caching is off");
  Drain(*first.loader);
  OpenLoader(Recipe(data));  // a second loader: the data keeps the copy it has
  EXPECT_EQ(data->calls(), 2);
  // The data's own rows are drawn per read: a copy of them is still refused.
  LoaderRecipe cached = Recipe(data);
  cached.cache.tier = CacheTier::kRam;
  EXPECT_THAT(RefusalOf(cached).what(), HasSubstr("freeze one draw"));
}

// The loader's stats say what serves it and what its source counted, whatever stands in front
// of the file: here a RAM cache asked for, and the remedies' copy that does not fit.
TEST(OpenLoader, StatsCarryTheTierAndTheChunkCountersThroughACache) {
  const std::string path = WriteGzipFile(256);
  LoaderRecipe cached = Recipe(OpenHdf5({path}, {"x"}));
  cached.cache.tier = CacheTier::kRam;
  cached.cache.background = false;
  OpenedLoader ram = OpenLoader(cached);
  Drain(*ram.loader);
  const SourceStats through_ram = ram.loader->stats().source;
  EXPECT_EQ(through_ram.cache_tier, CacheTier::kRam);
  EXPECT_GT(through_ram.chunks_decoded, 0);  // the first epoch filled the copy from the file
  EXPECT_EQ(through_ram.cache_built_fraction, -1);

  LoaderRecipe healing = Recipe(OpenHdf5({path}, {"x"}));
  healing.remedies = true;
  healing.cache.ram_budget_bytes = 1024;  // no copy fits
  OpenedLoader healed = OpenLoader(healing);
  std::string why;
  EXPECT_EQ(StartCacheWhileRunning(healed.loader->source(), &why), "");
  EXPECT_THAT(why, HasSubstr("budget"));
  Drain(*healed.loader);
  const SourceStats read = healed.loader->stats().source;
  EXPECT_EQ(read.cache_tier, CacheTier::kNone);
  EXPECT_GT(read.chunks_decoded + read.chunk_cache_hits, 0);
  EXPECT_GT(read.chunk_cache_bytes, 0);
  std::filesystem::remove(path);
}

TEST(OpenLoader, StatsOfASourceThatDecodesNoChunksSayNone) {
  OpenedLoader out = OpenLoader(Recipe(Data()));
  ASSERT_TRUE(out.loader->Next());
  const SourceStats stats = out.loader->stats().source;
  EXPECT_EQ(stats.cache_tier, CacheTier::kNone);
  EXPECT_EQ(stats.chunks_decoded, -1);
  EXPECT_THAT(out.loader->stats().ToJson(), HasSubstr("\"source\":{\"cache_tier\":\"none\"}"));
}

// Last in this file: turning the disk tier on lasts for the process.
TEST(OpenLoader, TheDiskTierKeepsRemoteDataAndIsTurnedOnBeforeTheDataIsOpened) {
  LoaderRecipe local = Recipe(nullptr);
  local.path = "/tmp/train.h5";
  local.cache.tier = CacheTier::kDisk;
  const Error on_disk = RefusalOf(local);
  EXPECT_EQ(on_disk.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(on_disk.what(), HasSubstr("already on disk"));

  LoaderRecipe opened_before = Recipe(Data());
  opened_before.cache.tier = CacheTier::kDisk;
  EXPECT_THAT(RefusalOf(opened_before).what(), HasSubstr("was opened without it"));

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("open_loader_disk_" + std::to_string(getpid())))
          .string();
  CacheOptions disk;
  disk.disk_dir = dir;
  UseDiskTier("s3://bucket/train.h5", disk);
  LoaderRecipe after = Recipe(Data());
  after.cache.tier = CacheTier::kDisk;
  after.remedies = true;
  OpenedLoader out = OpenLoader(after);
  EXPECT_EQ(out.cache.tier, CacheTier::kDisk);
  EXPECT_EQ(out.cache.path, dir);
  // The disk tier is below the source: the remedies may still copy it into memory.
  std::string why;
  EXPECT_THAT(StartCacheWhileRunning(out.loader->source(), &why), HasSubstr("a RAM copy"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpufeed

namespace gpufeed {
namespace {

// Rows already in memory, or made of a variable-length field's items, are never copied by
// the remedies: the copy would read no faster (Source::copy_speeds_reads).
TEST(OpenLoader, TheRemediesLeaveRowsInMemoryAlone) {
  std::vector<float> x(64 * 4, 1.0f);
  std::vector<int32_t> tokens(100, 7);
  std::vector<int64_t> offsets = {0, 10, 40, 100};
  const auto memory = OpenMemory({{FieldSpec{"x", DType::kFloat32, {4}}, x.data(), 64}});
  const auto ragged = OpenRagged({{.spec = {"tokens", DType::kInt32, {kVariableDim}},
                                   .values = tokens.data(),
                                   .items = 100,
                                   .offsets = offsets.data(),
                                   .samples = 3}});
  for (const auto& source : {memory, ragged}) {
    LoaderRecipe recipe = Recipe(source);
    recipe.remedies = true;
    if (source == ragged) recipe.pack = PackOptions{.length = 16};
    OpenedLoader out = OpenLoader(recipe);
    std::string why;
    EXPECT_EQ(StartCacheWhileRunning(out.loader->source(), &why), "");
    EXPECT_THAT(why, HasSubstr("not opened to cache while it runs"));
  }
}

}  // namespace
}  // namespace gpufeed
