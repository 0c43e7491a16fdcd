#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>

#include "cache/shm/shm_open.h"
#include "cache/shm/shm_user_dir.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

std::shared_ptr<Source> Synthetic(uint64_t seed) {
  return OpenSynthetic(ParseSchema("x:float32[256]"), 500, seed);
}

TEST(CacheDirTest, ListsCountsUsersRemovesAndCollects) {
  ScratchDir dir;
  auto a = OpenShmCache(Synthetic(1), {.dir = dir.path(), .threads = 1, .verbose = false});
  auto b = OpenShmCache(Synthetic(2), {.dir = dir.path(), .threads = 1, .verbose = false});
  auto a2 = OpenShmCache(Synthetic(1), {.dir = dir.path(), .threads = 1, .verbose = false});
  b.source.reset();
  // A dead builder's leftover and a file that is not a cache, in the user's cache folder.
  const std::string user = fs::path(ShmUserDirPath(dir.path())).filename().string();
  dir.Write(fmt::format("{}/gpufeed-{}.tmp-999999", user, "0123456789abcdef"), "partial");
  dir.Write(fmt::format("{}/gpufeed-{}", user, "fedcba9876543210"), "garbage");
  dir.Write(user + "/unrelated", "x");
  // A file whose header cannot be read is listed with its age from its last write.
  fs::last_write_time(fs::path(dir.path()) / user / "gpufeed-fedcba9876543210",
                      fs::file_time_type::clock::now() - std::chrono::hours(1));

  auto list = ListShmCaches(dir.path());
  ASSERT_EQ(list.size(), 4u);
  std::map<std::string, ShmCacheEntry> by_key;
  for (auto& e : list) by_key[e.key] = e;
  const ShmCacheEntry& ea = by_key.at(a.key);
  EXPECT_TRUE(ea.valid);
  EXPECT_EQ(ea.processes, 2);  // two mappings (a and a2), each with its shared flock
  EXPECT_EQ(ea.bytes, fs::file_size(a.path));
  EXPECT_NE(ea.description.find("synthetic"), std::string::npos);
  EXPECT_LT(ea.age_seconds, 60);
  EXPECT_EQ(by_key.at(b.key).processes, 0);
  EXPECT_TRUE(by_key.at("0123456789abcdef").half_built);
  EXPECT_FALSE(by_key.at("fedcba9876543210").valid);
  EXPECT_NEAR(by_key.at("fedcba9876543210").age_seconds, 3600, 120);

  const auto removed = CollectShmGarbage(dir.path());
  EXPECT_EQ(removed.size(), 2u);  // the leftover and the garbage; both caches match
  EXPECT_EQ(ListShmCaches(dir.path()).size(), 2u);

  EXPECT_TRUE(RemoveShmCache(b.key, dir.path()));
  EXPECT_FALSE(RemoveShmCache(b.key, dir.path()));
  EXPECT_THROW(RemoveShmCache("nope", dir.path()), Error);
  EXPECT_FALSE(fs::exists(b.path));
  EXPECT_FALSE(fs::exists(b.path + ".lock"));
  // A cache removed while mapped keeps serving the process that maps it.
  EXPECT_TRUE(RemoveShmCache(a.key, dir.path()));
  std::vector<float> row(256);
  const int64_t index = 3;
  a.source->Read({&index, 1}, {{reinterpret_cast<std::byte*>(row.data())}, 1}, nullptr);
  std::vector<float> want(256);
  Synthetic(1)->Read({&index, 1}, {{reinterpret_cast<std::byte*>(want.data())}, 1}, nullptr);
  EXPECT_EQ(row, want);
  EXPECT_TRUE(ListShmCaches(dir.path()).empty());
  EXPECT_TRUE(fs::exists(ShmUserDirPath(dir.path()) + "/unrelated"));
}

// A .npy file of 4 float32 values, all `value`.
std::string Npy(float value) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  for (int i = 0; i < 4; ++i) out.append(reinterpret_cast<const char*>(&value), sizeof(value));
  return out;
}

// A rewrite that keeps the size and restores the mtime is a new version (inode/ctime in the
// key), and building it removes the older version's cache, which nobody maps any more.
TEST(CacheDirTest, ARewriteKeepingSizeAndMtimeIsANewVersionAndTheOldOneGoes) {
  ScratchDir shm;
  ScratchDir data;
  const std::string file = data.Write("d/x.npy", Npy(1.0f));
  const std::string folder = data.path() + "/d";
  auto first = OpenShmCache(OpenNumpy(folder), {.dir = shm.path(), .threads = 1, .verbose = false});
  ASSERT_TRUE(first.built);
  first.source.reset();
  struct stat before {};
  ASSERT_EQ(stat(file.c_str(), &before), 0);
  data.Write("d/x.npy", Npy(2.0f));  // same size
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, file.c_str(), times, 0), 0);  // same mtime
  auto second =
      OpenShmCache(OpenNumpy(folder), {.dir = shm.path(), .threads = 1, .verbose = false});
  EXPECT_TRUE(second.built);
  EXPECT_NE(second.key, first.key);
  EXPECT_FALSE(fs::exists(first.path));
  const auto list = ListShmCaches(shm.path());
  ASSERT_EQ(list.size(), 1U);
  EXPECT_EQ(list[0].key, second.key);
  EXPECT_FALSE(list[0].stale);
}

// Sets the cache file's access time (its last use) to `days` ago.
void LastUsedDaysAgo(const std::string& path, int days) {
  struct timespec times[2] = {{0, 0}, {0, UTIME_OMIT}};
  times[0].tv_sec = time(nullptr) - days * 86400;
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(CacheDirTest, ListsTheSourceTheShareBuiltAndTheLastUse) {
  ScratchDir shm;
  ScratchDir data;
  data.Write("d/x.npy", Npy(1.0f));
  auto r = OpenShmCache(OpenNumpy(data.path() + "/d"),
                        {.dir = shm.path(), .threads = 1, .verbose = false});
  ASSERT_TRUE(r.built);
  LastUsedDaysAgo(r.path, 2);
  auto list = ListShmCaches(shm.path());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].sources, (std::vector<std::string>{data.path() + "/d"}));
  EXPECT_EQ(list[0].built_share, 1.0);
  EXPECT_NEAR(list[0].idle_seconds, 2 * 86400, 120);
  // Listing it (which reads its header) and verifying it are no use.
  EXPECT_TRUE(VerifyShmCache(r.key, shm.path()).ok);
  list = ListShmCaches(shm.path());
  EXPECT_NEAR(list[0].idle_seconds, 2 * 86400, 120);
  // Opening it again is a use.
  auto again = OpenShmCache(OpenNumpy(data.path() + "/d"),
                            {.dir = shm.path(), .threads = 1, .verbose = false});
  ASSERT_FALSE(again.built);
  list = ListShmCaches(shm.path());
  EXPECT_LT(list[0].idle_seconds, 120);
}

TEST(CacheDirTest, CachesOfASourceAreFoundByItsFolderItsFileOrAFolderAbove) {
  ScratchDir shm;
  ScratchDir data;
  data.Write("d/x.npy", Npy(1.0f));
  data.Write("dd/x.npy", Npy(2.0f));
  auto d = OpenShmCache(OpenNumpy(data.path() + "/d"),
                        {.dir = shm.path(), .threads = 1, .verbose = false});
  auto dd = OpenShmCache(OpenNumpy(data.path() + "/dd"),
                         {.dir = shm.path(), .threads = 1, .verbose = false});
  const auto keys = [&](const std::string& source) {
    std::vector<std::string> out;
    for (const auto& e : ShmCachesOfSource(source, shm.path())) out.push_back(e.key);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(keys(data.path() + "/d"), std::vector<std::string>{d.key});
  EXPECT_EQ(keys(data.path() + "/d/"), std::vector<std::string>{d.key});
  EXPECT_EQ(keys(data.path() + "/d/x.npy"), std::vector<std::string>{d.key});
  std::vector<std::string> both = {d.key, dd.key};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(keys(data.path()), both);
  EXPECT_TRUE(keys(data.path() + "/x").empty());
}

// gc evicts caches unused for longer than asked, then the least recently used down to a size,
// and never a cache a process holds.
TEST(CacheDirTest, GcEvictsTheUnusedAndTheLeastRecentlyUsedButNeverAHeldCache) {
  ScratchDir dir;
  const ShmOpenOptions options{.dir = dir.path(), .threads = 1, .verbose = false};
  auto held = OpenShmCache(Synthetic(1), options);  // stays open: held
  auto old = OpenShmCache(Synthetic(2), options);
  auto recent = OpenShmCache(Synthetic(3), options);
  auto newest = OpenShmCache(Synthetic(4), options);
  old.source.reset();
  recent.source.reset();
  newest.source.reset();
  LastUsedDaysAgo(held.path, 5);
  LastUsedDaysAgo(old.path, 3);
  LastUsedDaysAgo(recent.path, 1);
  std::vector<ShmCacheEntry> kept;
  auto removed = CollectShmGarbage(dir.path(), "", {.older_than_s = 2 * 86400.0}, &kept);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].key, old.key);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].key, held.key);
  EXPECT_EQ(kept[0].processes, 1);
  // Three caches of the same size left; room for two: the least recently used unheld one goes.
  const uint64_t bytes = fs::file_size(held.path);
  kept.clear();
  removed = CollectShmGarbage(dir.path(), "", {.max_bytes = 2 * bytes}, &kept);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].key, recent.key);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].key, held.key);
  // Room for none: still never the held one.
  removed = CollectShmGarbage(dir.path(), "", {.max_bytes = 1});
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].key, newest.key);
  ASSERT_EQ(ListShmCaches(dir.path()).size(), 1u);
  EXPECT_TRUE(fs::exists(held.path));
}

}  // namespace
}  // namespace gpufeed
