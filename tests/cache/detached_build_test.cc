// A build handed over: a cached source destroyed during its shm build starts a detached
// `gpufeed cache build` of the same source, which publishes the key the loader used; the
// command line it gets carries no password; with detach off, or without a CLI, nothing is
// handed over.
#include "cache/detached_build.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cache/background_cache.h"
#include "cache/cache_test_util.h"
#include "gpufeed/cache.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::InstrumentedSource;
using testing::ScratchDir;

// A NumPy folder of 16,000 rows of 1 KiB (four build tasks).
std::string WriteData(const ScratchDir& data) {
  const FieldSpec x{"x", DType::kInt32, {256}};
  std::vector<int32_t> values(256 * 16000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i);
  WriteNpy(data.Path("x.npy"), x, 16000, values.data());
  return data.path();
}

// The published caches in the shm root `dir`, once one is there (or none after 60 s).
std::vector<ShmCacheEntry> Published(const std::string& dir) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    std::vector<ShmCacheEntry> done;
    for (auto& e : ListShmCaches(dir)) {
      if (e.path.find(".tmp-") == std::string::npos) done.push_back(std::move(e));
    }
    if (!done.empty() || std::chrono::steady_clock::now() > deadline) return done;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Opens the cache of `folder` in the background through a source slowed to a few MB/s, waits
// until this process builds, then destroys it: the build stops unfinished.
std::string OpenAndStop(const std::string& folder, const std::string& shm, bool detach) {
  auto slow = std::make_shared<InstrumentedSource>(OpenPath(folder, {}));
  slow->delay_us = 200'000;
  CacheOptions options{.tier = CacheTier::kShm, .shm_dir = shm, .threads = 2, .verbose = false};
  options.detach = detach;
  options.source_path = folder;
  options.cli_binary = GPUFEED_CLI;
  CacheInfo info;
  auto cached = OpenCached(slow, options, &info);
  while (slow->reads.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  cached.reset();
  EXPECT_LT(info.progress->Get().built_fraction, 1.0);
  return info.key;
}

TEST(DetachedBuildTest, AStoppedBuildIsPublishedUnderTheLoadersKey) {
  ScratchDir shm;
  ScratchDir data;
  const std::string key = OpenAndStop(WriteData(data), shm.path(), /*detach=*/true);
  const std::vector<ShmCacheEntry> published = Published(shm.path());
  ASSERT_EQ(published.size(), 1u);
  EXPECT_EQ(published[0].key, key);  // the detached build computed the loader's key
  EXPECT_TRUE(published[0].valid);
  EXPECT_EQ(published[0].built_share, 1.0);
  EXPECT_EQ(key, CacheKey(*OpenPath(data.path(), {})));
}

TEST(DetachedBuildTest, WithDetachOffNothingIsPublished) {
  ScratchDir shm;
  ScratchDir data;
  OpenAndStop(WriteData(data), shm.path(), /*detach=*/false);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const auto& e : ListShmCaches(shm.path())) ADD_FAILURE() << e.path;
}

TEST(DetachedBuildTest, TheCommandLineCarriesNoPassword) {
  DetachedBuild build{.source_path =
                          "postgresql://ann:s%40cret@db.example/train?table=t&"
                          "password=other&key=id",
                      .fields = {"x", "y"},
                      .key = "0123456789abcdef",
                      .shm_dir = "/dev/shm"};
  std::string password;
  const std::vector<std::string> args = DetachedBuildArgs(build, &password);
  EXPECT_EQ(password, "other");  // the parameter is what libpq would use last
  for (const auto& a : args) EXPECT_EQ(a.find("cret"), std::string::npos) << a;
  for (const auto& a : args) EXPECT_EQ(a.find("other"), std::string::npos) << a;
  EXPECT_EQ(args[3], "postgresql://ann@db.example/train?table=t&key=id");
  EXPECT_EQ(args, (std::vector<std::string>{"gpufeed", "cache", "build", args[3], "--key",
                                            "0123456789abcdef", "--detach", "--dir", "/dev/shm",
                                            "--fields", "x,y"}));
}

TEST(DetachedBuildTest, AMissingCliIsSaidNotThrown) {
  DetachedBuild build{
      .cli_binary = "/nonexistent/gpufeed", .source_path = "/data/x.h5", .key = "0123456789abcdef"};
  EXPECT_NE(SpawnDetachedBuild(build).find("not an executable"), std::string::npos);
}

}  // namespace
}  // namespace gpufeed
