// The disk cache's blocks against damage on disk: a block cut short, with a zero-filled tail
// or a flipped byte is reported once (a warning naming the block file, the object and what is
// wrong), removed and fetched again, and the reader gets the object's bytes; a downloader
// killed mid-block leaves nothing a restarted reader serves; blocks of the layout before
// trailers are fetched again without a warning; VerifyDiskCache names damaged blocks and
// removes them on request.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "error_code_of.h"
#include "remote/disk/disk_cache.h"
#include "remote/disk_cache_fixture.h"
#include "remote/disk/disk_cache_verify.h"

namespace gpufeed {
namespace {

using testing::kBlock;
using testing::kBlockFile;
using testing::RandomBytes;

// The lines logged while it lives.
class LogCapture {
 public:
  LogCapture()
      : previous_(SetLogSink([this](LogLevel level, std::string_view message) {
          std::lock_guard<std::mutex> lock(mu_);
          (level == LogLevel::kWarning ? warnings_ : infos_).emplace_back(message);
        })) {}
  ~LogCapture() { SetLogSink(previous_); }
  std::vector<std::string> warnings() const {
    std::lock_guard<std::mutex> lock(mu_);
    return warnings_;
  }
  std::vector<std::string> infos() const {
    std::lock_guard<std::mutex> lock(mu_);
    return infos_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> warnings_;
  std::vector<std::string> infos_;
  LogSink previous_;
};

class DiskCacheIntegrityTest : public testing::DiskCacheFixture {
 protected:
  // An object of three whole blocks and a short last one, its blocks on disk, fetched by an
  // instance that never read them back (another process, for the instances made later).
  void Fill() {
    object_ = RandomBytes(kBlock * 3 + 100, 21);
    base_->Put("s3://b/x", object_, "e");
    std::vector<char> all(object_.size());
    ReadFully(*Cache()->Open("s3://b/x"), 0, all.data(), all.size(), "fill");
    ASSERT_EQ(all, object_);
  }
  std::string BlockFile(uint64_t index) const { return ObjectDir() + "/" + std::to_string(index); }
  // Reads the object with a new instance (a process that starts now): its bytes must be the
  // object's, and what it logs is returned.
  void ReadAllWithANewInstance(std::shared_ptr<DiskCacheFileSystem>* fs = nullptr) {
    auto cache = Cache();
    std::vector<char> all(object_.size());
    ReadFully(*cache->Open("s3://b/x"), 0, all.data(), all.size(), "all");
    EXPECT_EQ(all, object_);
    if (fs != nullptr) *fs = cache;
  }
  // Damages block `index` on disk with `damage`, reads everything with a new instance, and
  // checks that the block was reported once (with `words` in the warning), fetched again and
  // is whole on disk.
  void ExpectReportedOnceAndFetchedAgain(uint64_t index, const std::function<void(int fd)>& damage,
                                         const std::string& words) {
    Fill();
    const int fd = open(BlockFile(index).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    damage(fd);
    close(fd);
    const int64_t fetched = base_->bytes_read.load();
    const LogCapture log;
    std::shared_ptr<DiskCacheFileSystem> fs;
    ReadAllWithANewInstance(&fs);
    ASSERT_EQ(log.warnings().size(), 1u);
    const std::string warning = log.warnings()[0];
    EXPECT_NE(warning.find(BlockFile(index)), std::string::npos) << warning;
    EXPECT_NE(warning.find("s3://b/x"), std::string::npos) << warning;
    EXPECT_NE(warning.find(words), std::string::npos) << warning;
    EXPECT_EQ(fs->stats().damaged, 1);
    EXPECT_EQ(fs->stats().misses, 1);
    const uint64_t payload = std::min<uint64_t>(kBlock, object_.size() - index * kBlock);
    EXPECT_EQ(base_->bytes_read.load() - fetched, static_cast<int64_t>(payload));
    EXPECT_EQ(std::filesystem::file_size(BlockFile(index)), BlockFileBytes(payload));
    // Whole again: a third process reads it all from disk, quietly.
    std::shared_ptr<DiskCacheFileSystem> third;
    ReadAllWithANewInstance(&third);
    EXPECT_EQ(third->stats().misses, 0);
    EXPECT_EQ(log.warnings().size(), 1u);
    EXPECT_TRUE(VerifyDiskCache(dir_, false).ok());
  }

  std::vector<char> object_;
};

TEST_F(DiskCacheIntegrityTest, ABlockCutShortIsReportedOnceAndFetchedAgain) {
  ExpectReportedOnceAndFetchedAgain(
      1, [](int fd) { ASSERT_EQ(ftruncate(fd, kBlock / 2), 0); }, "cut short");
}

TEST_F(DiskCacheIntegrityTest, ABlockWithAZeroFilledTailIsReportedOnceAndFetchedAgain) {
  // What a power cut leaves of a block renamed before its bytes reached the disk.
  ExpectReportedOnceAndFetchedAgain(
      2,
      [](int fd) {
        const std::vector<char> zeros(1000, '\0');
        ASSERT_EQ(pwrite(fd, zeros.data(), zeros.size(), kBlockFile - zeros.size()),
                  static_cast<ssize_t>(zeros.size()));
      },
      "zeros");
}

void FlipByte(int fd, off_t offset) {
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, offset), 1);
  c = static_cast<char>(c ^ 0x10);
  ASSERT_EQ(pwrite(fd, &c, 1, offset), 1);
}

TEST_F(DiskCacheIntegrityTest, ABlockWithAFlippedByteIsReportedOnceAndFetchedAgain) {
  ExpectReportedOnceAndFetchedAgain(
      0, [](int fd) { FlipByte(fd, 1234); }, "checksum");
}

TEST_F(DiskCacheIntegrityTest, ADamagedLastBlockOfAnotherLengthIsFetchedAgain) {
  ExpectReportedOnceAndFetchedAgain(
      3, [](int fd) { ASSERT_EQ(ftruncate(fd, 3), 0); }, "cut short");
}

// A downloader killed between reserving a block and publishing it: the restarted reader
// serves the object's bytes, and the killed writer's temporary is collected.
TEST_F(DiskCacheIntegrityTest, ADownloaderKilledMidBlockLeavesNothingServed) {
  object_ = RandomBytes(kBlock * 2, 22);
  base_->Put("s3://b/x", object_, "e");
  Cache()->Open("s3://b/x");  // the object's folder
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    base_->delay_us = 60'000'000;  // the fetch never ends: killed with its temporary open
    try {
      std::vector<char> all(object_.size());
      ReadFully(*Cache()->Open("s3://b/x"), 0, all.data(), all.size(), "all");
    } catch (...) {
    }
    _exit(0);
  }
  bool reserved = false;
  for (int i = 0; i < 2000 && !reserved; ++i) {
    for (const auto& e : std::filesystem::directory_iterator(ObjectDir())) {
      reserved = reserved || e.path().filename().string().find(".tmp.") != std::string::npos;
    }
    if (!reserved) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(reserved) << "the child never reserved a block";
  ASSERT_TRUE(WIFSIGNALED(status));
  const LogCapture log;
  std::shared_ptr<DiskCacheFileSystem> fs;
  ReadAllWithANewInstance(&fs);
  EXPECT_EQ(fs->stats().misses, 2);
  EXPECT_EQ(fs->stats().damaged, 0);
  EXPECT_TRUE(log.warnings().empty());
  fs->CollectGarbage();
  EXPECT_GE(fs->stats().stale_removed, 1);
  EXPECT_EQ(DiskBytes(), 2 * kBlockFile);
}

// Blocks of the layout before trailers: exactly the payload's length, no trailer. They are
// fetched again, with at most one line of information and no warning.
TEST_F(DiskCacheIntegrityTest, BlocksOfTheOlderLayoutAreFetchedAgainQuietly) {
  object_ = RandomBytes(kBlock * 2 + 10, 23);
  base_->Put("s3://b/x", object_, "e");
  Cache()->Open("s3://b/x");  // the object's folder
  for (const auto& [index, length] : {std::pair<int, uint64_t>{0, kBlock}, {1, kBlock}, {2, 10}}) {
    const int fd = open(BlockFile(index).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    const std::vector<char> stale(length, 'Z');  // not the object's bytes: never served
    ASSERT_EQ(write(fd, stale.data(), stale.size()), static_cast<ssize_t>(stale.size()));
    close(fd);
  }
  EXPECT_EQ(VerifyDiskCache(dir_, false).other_layout, 3);
  const LogCapture log;
  std::shared_ptr<DiskCacheFileSystem> fs;
  ReadAllWithANewInstance(&fs);
  EXPECT_TRUE(log.warnings().empty());
  EXPECT_LE(log.infos().size(), 1u);
  EXPECT_EQ(fs->stats().misses, 3);
  EXPECT_EQ(fs->stats().damaged, 0);
  for (int index = 0; index < 2; ++index) {
    EXPECT_EQ(std::filesystem::file_size(BlockFile(index)), kBlockFile);
  }
  const DiskCacheVerifyReport r = VerifyDiskCache(dir_, false);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.other_layout, 0);
}

TEST_F(DiskCacheIntegrityTest, VerifyNamesADamagedBlockAndItsObjectAndRemovesItWhenAsked) {
  Fill();
  {
    const DiskCacheVerifyReport clean = VerifyDiskCache(dir_, false);
    EXPECT_TRUE(clean.ok());
    EXPECT_EQ(clean.objects, 1);
    EXPECT_EQ(clean.blocks, 4);
    EXPECT_EQ(clean.bytes, 3 * kBlockFile + BlockFileBytes(100));
  }
  const int fd = open(BlockFile(2).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  FlipByte(fd, 17);
  close(fd);
  const DiskCacheVerifyReport bad = VerifyDiskCache(dir_, false);
  ASSERT_EQ(bad.damaged.size(), 1u);
  EXPECT_EQ(bad.damaged[0].path, BlockFile(2));
  EXPECT_EQ(bad.damaged[0].object, "s3://b/x");
  EXPECT_EQ(bad.damaged[0].index, 2u);
  EXPECT_NE(bad.damaged[0].what.find("checksum"), std::string::npos) << bad.damaged[0].what;
  EXPECT_FALSE(bad.damaged[0].removed);
  EXPECT_TRUE(std::filesystem::exists(BlockFile(2)));

  const DiskCacheVerifyReport removed = VerifyDiskCache(dir_, true);
  ASSERT_EQ(removed.damaged.size(), 1u);
  EXPECT_TRUE(removed.damaged[0].removed) << removed.damaged[0].kept_why;
  EXPECT_FALSE(std::filesystem::exists(BlockFile(2)));
  EXPECT_TRUE(VerifyDiskCache(dir_, false).ok());
  std::shared_ptr<DiskCacheFileSystem> fs;
  ReadAllWithANewInstance(&fs);
  EXPECT_EQ(fs->stats().misses, 1);
  EXPECT_EQ(fs->stats().damaged, 0);
}

TEST_F(DiskCacheIntegrityTest, VerifyOfAFolderThatIsNotThereIsNotFound) {
  EXPECT_EQ(testing::ErrorCodeOf([&] { VerifyDiskCache(root_ + "/none", false); }),
            ErrorCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/none"));
}

}  // namespace
}  // namespace gpufeed
