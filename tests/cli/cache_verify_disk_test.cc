// `gpufeed cache verify --disk`: exit 0 over a clean disk cache, 4 (corrupt data) naming the
// block file when a block's byte was flipped, 3 when the folder is not there.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cli/app.h"
#include "remote/disk_cache_fixture.h"

namespace gpufeed::cli {
namespace {

using gpufeed::testing::kBlock;
using gpufeed::testing::RandomBytes;
using CacheVerifyDiskTest = gpufeed::testing::DiskCacheFixture;

// The command's exit code and what it printed.
int RunVerify(std::vector<std::string> args, std::string* out) {
  std::vector<const char*> argv = {"gpufeed", "cache", "verify"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  const auto app = MakeApp();
  ::testing::internal::CaptureStdout();
  const int code = RunCommandLine(*app, static_cast<int>(argv.size()), argv.data());
  *out = ::testing::internal::GetCapturedStdout();
  return code;
}

TEST_F(CacheVerifyDiskTest, ExitsZeroWhenCleanAndFourNamingAFlippedBlock) {
  const std::vector<char> object = RandomBytes(kBlock * 3, 31);
  base_->Put("s3://b/x", object, "e");
  std::vector<char> all(object.size());
  ReadFully(*Cache()->Open("s3://b/x"), 0, all.data(), all.size(), "fill");
  std::string out;
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", dir_}, &out), 0) << out;
  EXPECT_NE(out.find("3 blocks"), std::string::npos) << out;
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", dir_, "--json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"ok\": true"), std::string::npos) << out;

  const std::string block = ObjectDir() + "/1";
  const int fd = open(block.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, 100), 1);
  c = static_cast<char>(c ^ 1);
  ASSERT_EQ(pwrite(fd, &c, 1, 100), 1);
  close(fd);
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", dir_}, &out), 4) << out;
  EXPECT_NE(out.find(block), std::string::npos) << out;
  EXPECT_NE(out.find("s3://b/x"), std::string::npos) << out;
  EXPECT_NE(out.find("--remove"), std::string::npos) << out;  // says how to remove it
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", dir_, "--remove"}, &out), 4) << out;
  EXPECT_NE(out.find("removed"), std::string::npos) << out;
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", dir_}, &out), 0) << out;
}

TEST_F(CacheVerifyDiskTest, AFolderThatIsNotThereExitsThreeAndKeysWithDiskTwo) {
  std::string out;
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", root_ + "/none"}, &out), 3) << out;
  EXPECT_EQ(RunVerify({"--disk", "--disk-dir", dir_, "0123456789abcdef"}, &out), 2) << out;
  EXPECT_EQ(RunVerify({}, &out), 2) << out;
}

}  // namespace
}  // namespace gpufeed::cli
