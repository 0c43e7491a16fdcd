// `gpufeed cache ...` through its CLI11 registration, against a scratch folder.
#include "cli/cache_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cache/shm/shm_open.h"
#include "gpufeed/cache.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ScratchDir;

// Runs `gpufeed <args>` with the cache command; returns the exit code, stdout in *out.
int RunCli(std::vector<std::string> args, std::string* out) {
  CLI::App app("gpufeed");
  app.require_subcommand(1);
  cli::RegisterCacheCommand(app);
  args.insert(args.begin(), "gpufeed");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  ::testing::internal::CaptureStdout();
  int code = 0;
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  } catch (const CLI::ParseError& e) {
    code = e.get_exit_code();
  }
  *out = ::testing::internal::GetCapturedStdout();
  return code;
}

TEST(CacheCommandTest, BuildListRemove) {
  ScratchDir shm;
  ScratchDir data;
  const FieldSpec x{"x", DType::kInt32, {8}};
  std::vector<int32_t> values(8 * 50, 3);
  WriteNpy(data.Path("x.npy"), x, 50, values.data());
  std::string out;
  ASSERT_EQ(RunCli({"cache", "build", data.path(), "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("built "), std::string::npos) << out;
  const std::string key = CacheKey(*OpenNumpy(data.path()));
  ASSERT_EQ(RunCli({"cache", "build", data.path(), "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("found " + key), std::string::npos) << out;

  ASSERT_EQ(RunCli({"cache", "ls", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find(key), std::string::npos) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  EXPECT_NE(out.find(data.path()), std::string::npos) << out;  // the source
  EXPECT_NE(out.find("100%"), std::string::npos) << out;       // built
  ASSERT_EQ(RunCli({"cache", "ls", "--json", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("\"state\": \"ok\""), std::string::npos) << out;

  ASSERT_EQ(RunCli({"cache", "gc", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("nothing to collect"), std::string::npos) << out;
  EXPECT_EQ(RunCli({"cache", "rm", "0000000000000000", "--dir", shm.path()}, &out), 3);
  EXPECT_EQ(RunCli({"cache", "rm", "--dir", shm.path()}, &out), 2);
  ASSERT_EQ(RunCli({"cache", "rm", key, "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("removed " + key), std::string::npos) << out;
  ASSERT_EQ(RunCli({"cache", "ls", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("no gpufeed caches"), std::string::npos) << out;
}

TEST(CacheCommandTest, RmAllAndRmSourceKeepHeldCachesUnlessForced) {
  ScratchDir shm;
  ScratchDir data;
  const FieldSpec x{"x", DType::kInt32, {8}};
  std::vector<int32_t> values(8 * 50, 3);
  WriteNpy(data.Path("a/x.npy"), x, 50, values.data());
  WriteNpy(data.Path("b/x.npy"), x, 50, values.data());
  const ShmOpenOptions options{.dir = shm.path(), .threads = 1, .verbose = false};
  auto held = OpenShmCache(OpenNumpy(data.Path("a")), options);
  auto free = OpenShmCache(OpenNumpy(data.Path("b")), options);
  free.source.reset();
  std::string out;
  ASSERT_EQ(RunCli({"cache", "rm", "--all", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("found 2 caches"), std::string::npos) << out;
  EXPECT_NE(out.find("1 held by 1 other process (kept: --force removes them too)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("kept " + held.key + " (held by 1 process)"), std::string::npos) << out;
  EXPECT_NE(out.find("removed " + free.key), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(held.path));
  EXPECT_FALSE(std::filesystem::exists(free.path));
  // By source: the held one stays without --force, goes with it.
  ASSERT_EQ(RunCli({"cache", "rm", "--source", data.Path("a"), "--dir", shm.path()}, &out), 0);
  EXPECT_TRUE(std::filesystem::exists(held.path));
  ASSERT_EQ(
      RunCli({"cache", "rm", "--source", data.Path("a"), "--force", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("removing 1 cache"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(held.path));
  EXPECT_NE(RunCli({"cache", "rm", "--source", data.Path("a"), "--dir", shm.path()}, &out), 0);
  // gc's limits parse, and refuse nonsense.
  EXPECT_EQ(
      RunCli({"cache", "gc", "--older-than", "1d", "--max-bytes", "4G", "--dir", shm.path()}, &out),
      0);
  EXPECT_NE(RunCli({"cache", "gc", "--older-than", "soon", "--dir", shm.path()}, &out), 0);
}

TEST(CacheCommandTest, VerifyReportsOkOrTheFirstBadBlock) {
  ScratchDir shm;
  ScratchDir data;
  const FieldSpec x{"x", DType::kInt32, {2048}};  // 8 KiB rows: a block each
  std::vector<int32_t> values(2048 * 20, 7);
  WriteNpy(data.Path("x.npy"), x, 20, values.data());
  std::string out;
  ASSERT_EQ(RunCli({"cache", "build", data.path(), "--dir", shm.path()}, &out), 0);
  const std::string key = CacheKey(*OpenNumpy(data.path()));
  ASSERT_EQ(RunCli({"cache", "verify", key, "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find(key + " ok: 20 blocks"), std::string::npos) << out;
  // The owner rewrites a byte of row 6 in place.
  const std::string path = ShmCachePath(shm.path(), key);
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path));
  const int64_t at = size - 14 * 8192 + 5;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.put('\x55');
  }
  EXPECT_NE(RunCli({"cache", "verify", key, "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find(key + " BAD: block 6 of 20: field 'x', samples 6 to 6"), std::string::npos)
      << out;
  ASSERT_NE(RunCli({"cache", "verify", key, "--json", "--dir", shm.path()}, &out), 0);
  EXPECT_NE(out.find("\"first_bad_block\":6"), std::string::npos) << out;
  EXPECT_NE(RunCli({"cache", "verify", "0000000000000000", "--dir", shm.path()}, &out), 0);
}

}  // namespace
}  // namespace gpufeed
