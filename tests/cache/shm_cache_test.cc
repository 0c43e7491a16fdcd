#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/cache_test_util.h"
#include "cache/shm/shm_format.h"
#include "cache/shm/shm_open.h"
#include "cache/shm/shm_source.h"
#include "cache/shm/shm_user_dir.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

namespace fs = std::filesystem;
using testing::InstrumentedSource;
using testing::Names;
using testing::ReadAll;
using testing::ReadRows;
using testing::ScratchDir;

// 3000 samples of 4 KiB + 8 bytes: about 12 MB, 760 blocks.
std::shared_ptr<Source> Synthetic(int64_t samples = 3000, uint64_t seed = 7) {
  return OpenSynthetic(ParseSchema("mel:float32[1,32,32],label:int64[]"), samples, seed);
}

ShmOpenOptions Options(const std::string& dir, int threads = 2) {
  return {.dir = dir, .threads = threads, .verbose = false};
}

TEST(ShmCacheTest, TheFirstOpenBuildsLaterOnesMapThePublishedFile) {
  ScratchDir dir;
  auto base = std::make_shared<InstrumentedSource>(Synthetic());
  ShmOpenResult first = OpenShmCache(base, Options(dir.path()));
  ASSERT_TRUE(first.source);
  EXPECT_TRUE(first.built);
  EXPECT_EQ(first.path, ShmUserDirPath(dir.path()) + "/gpufeed-" + CacheKey(*base));
  EXPECT_EQ(base->samples_read.load(), 3000);
  const auto expected = ReadAll(*Synthetic());
  EXPECT_EQ(ReadAll(*first.source), expected);
  EXPECT_EQ(Names(dir.path()),
            (std::vector<std::string>{"gpufeed-" + first.key, "gpufeed-" + first.key + ".lock"}));

  auto base2 = std::make_shared<InstrumentedSource>(Synthetic());
  ShmOpenResult second = OpenShmCache(base2, Options(dir.path()));
  ASSERT_TRUE(second.source);
  EXPECT_FALSE(second.built);
  ASSERT_NE(dynamic_cast<ShmCachedSource*>(second.source.get()), nullptr);
  EXPECT_EQ(ReadRows(*second.source, {2999, 5, 5, 0}), ReadRows(*Synthetic(), {2999, 5, 5, 0}));
  EXPECT_EQ(ReadAll(*second.source), expected);
  EXPECT_EQ(base2->samples_read.load(), 0);
  // The file is mapped: /proc/self/maps lists it (read-only, shared).
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool mapped = false;
  while (std::getline(maps, line)) {
    if (line.find(first.path) != std::string::npos && line.find(" r--s ") != std::string::npos) {
      mapped = true;
    }
  }
  EXPECT_TRUE(mapped);
}

// Only the owner can write a cache file, so readers do not re-hash it: a data block the owner
// damaged is served as it is, and `gpufeed cache verify` finds it and names the block.
TEST(ShmCacheTest, ADamagedDataBlockIsFoundByVerifyNotOnRead) {
  ScratchDir dir;
  ShmOpenResult built = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(built.source);
  const ShmVerifyReport clean = VerifyShmCache(built.key, dir.path());
  EXPECT_TRUE(clean.ok);
  EXPECT_EQ(clean.checked, clean.blocks);
  EXPECT_EQ(clean.first_bad_block, -1);
  // Flip one byte of sample 1234's mel row (the header stays intact).
  auto base = Synthetic();
  const ShmLayout layout = PlanShmLayout(base->schema(), base->size(), base->Identity(),
                                         base->schema().ToString(), base->Describe());
  {
    const int fd = open(built.path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t at = static_cast<off_t>(layout.header_bytes + layout.RowBegin(0, 1234) + 100);
    char c = 0;
    ASSERT_EQ(pread(fd, &c, 1, at), 1);
    c ^= 1;
    ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
    close(fd);
  }
  ShmOpenResult reopened = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(reopened.source);
  EXPECT_FALSE(reopened.built);
  EXPECT_NE(ReadRows(*reopened.source, {1234}), ReadRows(*Synthetic(), {1234}));
  const ShmVerifyReport r = VerifyShmCache(built.key, dir.path());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad_block, static_cast<int64_t>(layout.BlockOf(0, 1234)));
  EXPECT_EQ(r.checked, layout.BlockOf(0, 1234) + 1);
  EXPECT_NE(r.first_bad.find("field 'mel', samples 1234 to 1234"), std::string::npos)
      << r.first_bad;
  // Removed and opened again: rebuilt, and clean.
  reopened = {};
  ASSERT_TRUE(RemoveShmCache(built.key, dir.path()));
  ShmOpenResult rebuilt = OpenShmCache(Synthetic(), Options(dir.path()));
  EXPECT_TRUE(rebuilt.built);
  EXPECT_TRUE(VerifyShmCache(built.key, dir.path()).ok);
  EXPECT_EQ(ReadRows(*rebuilt.source, {1234}), ReadRows(*Synthetic(), {1234}));
}

TEST(ShmCacheTest, VerifyRefusesAMissingCacheAMalformedKeyAndADamagedHeader) {
  ScratchDir dir;
  ShmOpenResult built = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(built.source);
  EXPECT_THROW(VerifyShmCache("0000000000000000", dir.path()), Error);
  EXPECT_THROW(VerifyShmCache("../../etc/passwd", dir.path()), Error);
  try {
    VerifyShmCache("0000000000000000", dir.path());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  const int fd = open(built.path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "X", 1, 200), 1);  // inside the identity text
  close(fd);
  try {
    VerifyShmCache(built.key, dir.path());
    ADD_FAILURE() << "a damaged header verified";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
}

TEST(ShmCacheTest, ADamagedHeaderIsRemovedAndRebuilt) {
  ScratchDir dir;
  std::string path;
  {
    ShmOpenResult built = OpenShmCache(Synthetic(), Options(dir.path()));
    path = built.path;
  }
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "X", 1, 200), 1);  // inside the identity text
  close(fd);
  ShmOpenResult again = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(again.source);
  EXPECT_TRUE(again.built);
  EXPECT_EQ(ReadAll(*again.source), ReadAll(*Synthetic()));
}

TEST(ShmCacheTest, NoSpaceWhileBuildingWarnsAndLeavesNoPartialFile) {
  ScratchDir dir;
  ShmOpenOptions options = Options(dir.path());
  options.faults.enospc_after_bytes = 1 << 20;  // the build needs ~12 MB
  ShmOpenResult r = OpenShmCache(Synthetic(), options);
  EXPECT_EQ(r.source, nullptr);
  EXPECT_FALSE(r.built);
  EXPECT_NE(r.failure.find("No space left on device"), std::string::npos) << r.failure;
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"gpufeed-" + r.key + ".lock"}));
  // The next process (with room) builds it.
  ShmOpenResult next = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(next.source);
  EXPECT_TRUE(next.built);
}

TEST(ShmCacheTest, OpenCachedStreamsWhenTheShmFolderIsFull) {
  const std::string mnt =
      fs::temp_directory_path() / ("gpufeed-tiny-tmpfs-" + std::to_string(getpid()));
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    fs::remove(mnt);
    GTEST_SKIP() << "cannot mount a 1 MB tmpfs here (needs root): " << std::strerror(errno);
  }
  auto base = Synthetic();
  CacheInfo info;
  std::shared_ptr<Source> cached;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(cached = OpenCached(
                      base, {.tier = CacheTier::kShm, .shm_dir = mnt, .background = false}, &info));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cached, base);  // streaming, from the source itself
  EXPECT_EQ(info.tier, CacheTier::kNone);
  EXPECT_NE(err.find("WARNING: cannot build the shared-memory cache"), std::string::npos) << err;
  EXPECT_NE(err.find("free"), std::string::npos) << err;
  const auto names = Names(mnt);
  umount(mnt.c_str());
  fs::remove(mnt);
  EXPECT_EQ(names, (std::vector<std::string>{"gpufeed-" + info.key + ".lock"}));
}

TEST(ShmCacheTest, ConcurrentOpenersBuildOnce) {
  ScratchDir dir;
  std::vector<ShmOpenResult> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back(
        [&, t] { results[t] = OpenShmCache(Synthetic(), Options(dir.path(), 1)); });
  }
  for (auto& t : threads) t.join();
  int built = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.source);
    built += r.built ? 1 : 0;
  }
  EXPECT_EQ(built, 1);
  const auto expected = ReadAll(*Synthetic());
  for (const auto& r : results) EXPECT_EQ(ReadAll(*r.source), expected);
}

TEST(ShmCacheTest, ABuilderKilledMidBuildIsDetectedAndTheCacheRebuilt) {
  ScratchDir dir;
  const std::string key = CacheKey(*Synthetic());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The builder: a slow source, so it is surely killed half-way.
    auto slow = std::make_shared<InstrumentedSource>(Synthetic());
    slow->delay_us = 300000;
    OpenShmCache(slow, Options(dir.path(), 1));
    _exit(0);
  }
  const std::string tmp =
      fmt::format("{}/gpufeed-{}.tmp-{}", ShmUserDirPath(dir.path()), key, child);
  for (int i = 0; i < 500 && !fs::exists(tmp); ++i) usleep(10000);
  ASSERT_TRUE(fs::exists(tmp)) << "the builder never started";
  usleep(400000);  // at least one chunk written
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_TRUE(fs::exists(tmp));
  ASSERT_FALSE(fs::exists(ShmCachePath(dir.path(), key)));  // never published

  auto listed = ListShmCaches(dir.path());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].half_built);

  ShmOpenResult rebuilt = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(rebuilt.source);
  EXPECT_TRUE(rebuilt.built);
  EXPECT_TRUE(rebuilt.removed_leftover);
  EXPECT_FALSE(fs::exists(tmp));
  const auto expected = ReadAll(*Synthetic());
  EXPECT_EQ(ReadAll(*rebuilt.source), expected);

  // A later process finds it published, every sample matches, and it verifies.
  ShmOpenResult later = OpenShmCache(Synthetic(), Options(dir.path()));
  ASSERT_TRUE(later.source);
  EXPECT_FALSE(later.built);
  EXPECT_EQ(ReadAll(*later.source), expected);
  EXPECT_TRUE(VerifyShmCache(key, dir.path()).ok);
}

// Resident kB of this process's mappings of `path` (/proc/self/smaps).
uint64_t MappedRssKb(const std::string& path) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  uint64_t kb = 0;
  while (std::getline(in, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (first.find('-') != std::string::npos && first.back() != ':') {
      inside = line.size() >= path.size() &&
               line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      kb += std::stoull(line.substr(4));
    }
  }
  return kb;
}

// The process that builds the cache read the whole source through its mapping;
// those pages leave its PSS once the cache is published (the cache serves from then on).
TEST(ShmCacheTest, TheBuilderDropsTheSourcesMappedPages) {
  ScratchDir data;
  ScratchDir shm;
  const FieldSpec x{"x", DType::kFloat32, {1024}};
  std::vector<float> values(1024 * 256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  WriteNpy(data.Path("x.npy"), x, 256, values.data());
  auto base = OpenNumpy(data.path());
  ReadAll(*base);  // what a build does: every page of the file faulted into the mapping
  ASSERT_GT(MappedRssKb("x.npy"), 512u);
  ShmOpenResult r = OpenShmCache(base, Options(shm.path()));
  ASSERT_TRUE(r.built);
  EXPECT_EQ(MappedRssKb("x.npy"), 0u);
  EXPECT_EQ(ReadAll(*r.source), ReadAll(*OpenNumpy(data.path())));
  // The source's own reads still work (from the page cache).
  EXPECT_EQ(ReadRows(*base, {3})[0], ReadRows(*OpenNumpy(data.path()), {3})[0]);
}

TEST(ShmCacheTest, TheSourceChangedOnDiskIsADifferentCache) {
  ScratchDir data;
  ScratchDir shm;
  const FieldSpec x{"x", DType::kFloat32, {4}};
  std::vector<float> values(400);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  WriteNpy(data.Path("x.npy"), x, 100, values.data());
  CacheInfo old_info;
  auto old_cached = OpenCached(
      OpenNumpy(data.path()),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &old_info);
  EXPECT_EQ(old_info.tier, CacheTier::kShm);
  EXPECT_TRUE(old_info.built);

  for (auto& v : values) v = -v - 1;
  WriteNpy(data.Path("x.npy"), x, 100, values.data());
  // Same size; make sure the modification time moves even on a coarse clock.
  const auto t = fs::last_write_time(data.Path("x.npy"));
  fs::last_write_time(data.Path("x.npy"), t + std::chrono::seconds(1));
  CacheInfo new_info;
  auto new_cached = OpenCached(
      OpenNumpy(data.path()),
      {.tier = CacheTier::kShm, .shm_dir = shm.path(), .verbose = false, .background = false},
      &new_info);
  EXPECT_NE(new_info.key, old_info.key);
  EXPECT_TRUE(new_info.built);
  const auto got = ReadRows(*new_cached, {0, 99});
  float row0[4];
  std::memcpy(row0, got[0].data(), sizeof(row0));
  EXPECT_EQ(row0[0], -1.0f);
  EXPECT_EQ(row0[3], -4.0f);

  // gc removes the old cache: its source no longer matches.
  old_cached.reset();
  auto before = ListShmCaches(shm.path());
  ASSERT_EQ(before.size(), 2u);
  const auto removed = CollectShmGarbage(shm.path());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].key, old_info.key);
  EXPECT_TRUE(removed[0].stale);
  const auto after = ListShmCaches(shm.path());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].key, new_info.key);
  EXPECT_FALSE(after[0].stale);
}

}  // namespace
}  // namespace gpufeed
