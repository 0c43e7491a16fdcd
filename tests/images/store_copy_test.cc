// The decoded-image cache as the image source asks for it (gpufeed/cache.h, StoreBelow): the
// source makes no copy of its stored images itself; the copy handed back is made once per
// source, and a loader reading while it is handed back gets the crops it would get without it.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/images.h"
#include "gpufeed/loader.h"
#include "images/test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
using testing::ScratchDir;

// Two classes of small JPEGs of varied sizes.
void MakeFolder(const ScratchDir& dir) {
  for (int seed = 0; seed < 10; ++seed) {
    dir.Write(fmt::format("{}/{}.jpg", seed % 2 == 0 ? "ant" : "bee", seed),
              testing::RgbJpeg(40 + 7 * seed, 30 + 5 * seed, seed));
  }
}

ImageOptions Cached(CacheTier tier) {
  return {.size = 16, .cache = tier, .cache_size = 24, .verbose = false};
}

// The images of one shuffled epoch, in plan order; `halfway`, when given, runs after the
// first batch while the workers read on.
std::vector<uint8_t> Crops(const std::shared_ptr<Source>& source,
                           const std::function<void()>& halfway = nullptr) {
  Loader loader(source, {.batch_size = 3, .shuffle = true, .seed = 7, .workers = 3});
  std::vector<uint8_t> out;
  bool first = true;
  while (auto batch = loader.Next()) {
    const auto image = batch->field("image");
    out.insert(out.end(), image.as<uint8_t>(), image.as<uint8_t>() + image.bytes());
    if (first && halfway) halfway();
    first = false;
  }
  return out;
}

// The copy OpenLoader makes, counting the copies made and keeping what was asked.
struct Copier {
  std::atomic<int> made{0};
  CacheOptions asked;
  StoreBelow::MakeCopy Make() {
    return [this](std::shared_ptr<Source> store, const CacheOptions& options) {
      ++made;
      asked = options;
      return OpenCached(std::move(store), options);
    };
  }
};

TEST(ImageStoreCopy, TheSourceAsksForTheCopyAndMakesNone) {
  ScratchDir dir;
  MakeFolder(dir);
  auto source = OpenImages(dir.path(), Cached(CacheTier::kRam));
  EXPECT_EQ(source->cache_tier(), CacheTier::kNone);
  EXPECT_FALSE(source->rows_repeat());
  const StoreBelow* below = StoreBelow::Of(*source);
  ASSERT_NE(below, nullptr);
  const std::vector<uint8_t> uncached = Crops(source);
  Copier copier;
  below->CacheStore(copier.Make());
  EXPECT_EQ(copier.made, 1);
  EXPECT_EQ(copier.asked.tier, CacheTier::kRam);
  EXPECT_FALSE(copier.asked.verbose);
  EXPECT_EQ(source->cache_tier(), CacheTier::kRam);
  EXPECT_THAT(source->Describe(), HasSubstr("cached ram at 24"));
  EXPECT_EQ(Crops(source), uncached);
  below->CacheStore(copier.Make());  // another loader over the same source: the same copy
  EXPECT_EQ(copier.made, 1);
}

TEST(ImageStoreCopy, NoCacheAskedNoCopy) {
  ScratchDir dir;
  MakeFolder(dir);
  auto streaming = OpenImages(dir.path(), Cached(CacheTier::kNone));
  if (const StoreBelow* below = StoreBelow::Of(*streaming)) {
    Copier copier;
    below->CacheStore(copier.Make());
    EXPECT_EQ(copier.made, 0);
  }
  EXPECT_EQ(streaming->cache_tier(), CacheTier::kNone);
}

// Workers read while the copy is handed back: each read is served by the store or by the
// copy, which hold the same rows, so the epoch's crops are those of an epoch without a copy.
TEST(ImageStoreCopy, ACopyHandedBackWhileALoaderReadsChangesNoCrop) {
  ScratchDir dir;
  MakeFolder(dir);
  const std::vector<uint8_t> uncached = Crops(OpenImages(dir.path(), Cached(CacheTier::kRam)));
  auto source = OpenImages(dir.path(), Cached(CacheTier::kRam));
  Copier copier;
  const std::vector<uint8_t> switched =
      Crops(source, [&] { StoreBelow::Of(*source)->CacheStore(copier.Make()); });
  EXPECT_EQ(copier.made, 1);
  EXPECT_EQ(source->cache_tier(), CacheTier::kRam);
  EXPECT_EQ(switched, uncached);
}

TEST(ImageStoreCopy, ACopyThatFailsIsTriedAgain) {
  ScratchDir dir;
  MakeFolder(dir);
  auto source = OpenImages(dir.path(), Cached(CacheTier::kRam));
  const StoreBelow* below = StoreBelow::Of(*source);
  ASSERT_NE(below, nullptr);
  EXPECT_THROW(below->CacheStore([](std::shared_ptr<Source>, const CacheOptions&)
                                     -> std::shared_ptr<Source> {
                 throw Error(ErrorCode::kIo, "no room");
               }),
               Error);
  EXPECT_EQ(source->cache_tier(), CacheTier::kNone);
  Copier copier;
  below->CacheStore(copier.Make());
  EXPECT_EQ(copier.made, 1);
  EXPECT_EQ(source->cache_tier(), CacheTier::kRam);
}

}  // namespace
}  // namespace gpufeed
