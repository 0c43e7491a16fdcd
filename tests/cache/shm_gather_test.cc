// The shared-memory tier gathers from its mapping with the RAM tier's loop: the same batches,
// byte for byte, in the process that built the file and in one that found it published; and
// "auto" takes a published cache without measuring.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/shm/shm_source.h"
#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ScratchDir;

// 3000 samples: 4 KiB mel rows (a block each) and 8-byte labels (blocks of 512).
std::shared_ptr<Source> Synthetic() {
  return OpenSynthetic(ParseSchema("mel:float32[1,32,32],label:int64[]"), 3000, 21);
}

// Every batch of two shuffled epochs, each as its fields' bytes one after the other.
std::vector<std::vector<std::byte>> Batches(std::shared_ptr<Source> source) {
  Loader loader(
      std::move(source),
      {.batch_size = 256, .shuffle = true, .seed = 9, .rank = 0, .world_size = 1, .workers = 2});
  std::vector<std::vector<std::byte>> out;
  for (int epoch = 0; epoch < 2; ++epoch) {
    while (auto batch = loader.Next()) {
      std::vector<std::byte> bytes;
      for (int f = 0; f < static_cast<int>(batch->schema().fields.size()); ++f) {
        const FieldView view = batch->field(f);
        const auto* p = static_cast<const std::byte*>(view.data);
        bytes.insert(bytes.end(), p, p + view.bytes());
      }
      out.push_back(std::move(bytes));
    }
  }
  return out;
}

TEST(ShmGatherTest, TheShmTierGathersExactlyTheRamTiersBatches) {
  ScratchDir shm;
  CacheInfo ram_info;
  auto ram = OpenCached(
      Synthetic(),
      {.tier = CacheTier::kRam, .preload = true, .verbose = false, .background = false}, &ram_info);
  ASSERT_EQ(ram_info.tier, CacheTier::kRam);
  const auto want = Batches(ram);
  ASSERT_EQ(want.size(), 2u * 12);        // 3000 / 256 rounded up, two epochs
  EXPECT_EQ(Batches(Synthetic()), want);  // and the RAM tier's are the source's

  CacheInfo built;
  auto builder = OpenCached(
      Synthetic(),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &built);
  ASSERT_EQ(built.tier, CacheTier::kShm);
  ASSERT_TRUE(built.built);
  ASSERT_NE(dynamic_cast<const ShmCachedSource*>(builder.get()), nullptr);
  EXPECT_EQ(Batches(builder), want);

  CacheInfo found;
  auto reader = OpenCached(
      Synthetic(),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &found);
  ASSERT_EQ(found.tier, CacheTier::kShm);
  EXPECT_FALSE(found.built);
  EXPECT_EQ(Batches(reader), want);
}

TEST(ShmGatherTest, AutoUsesAPublishedCacheWithoutMeasuring) {
  ScratchDir shm;
  CacheInfo built;
  OpenCached(
      Synthetic(),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &built);
  ASSERT_TRUE(built.built);
  CacheInfo info;
  auto cached = OpenCached(
      Synthetic(),
      {.tier = CacheTier::kAuto, .shm_dir = shm.path(), .verbose = false, .background = false},
      &info);
  EXPECT_EQ(info.tier, CacheTier::kShm);
  EXPECT_FALSE(info.built);
  EXPECT_EQ(info.path, built.path);
  EXPECT_EQ(info.key, built.key);
  EXPECT_EQ(info.measured.source_bytes_per_s, 0);  // no probe ran
  EXPECT_EQ(info.measured.ram_bytes_per_s, 0);
  EXPECT_NE(info.reason.find("already built"), std::string::npos) << info.reason;
  EXPECT_NE(dynamic_cast<const ShmCachedSource*>(cached.get()), nullptr);
  // A published cache of another source is not this one's: that one measures.
  CacheInfo other;
  OpenCached(
      OpenSynthetic(ParseSchema("x:float32[64]"), 500, 3),
      {.tier = CacheTier::kAuto, .shm_dir = shm.path(), .verbose = false, .background = false},
      &other);
  EXPECT_GT(other.measured.source_bytes_per_s, 0);
}

}  // namespace
}  // namespace gpufeed
