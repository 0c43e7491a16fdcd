// `gpufeed cache ...` through its CLI11 registration, against a scratch folder.
#include "cli/cache_command.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "cache/shm_open.h"
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
  EXPECT_NE(out.find("numpy:"), std::string::npos) << out;
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

}  // namespace
}  // namespace gpufeed
