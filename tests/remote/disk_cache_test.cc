// DiskCacheFileSystem over an in-memory base file system that counts what it serves: bytes
// equal the object's across blocks, each block fetched once across instances, temporaries
// of killed writers never served, eviction within budget and least recently used first,
// held blocks kept, a new version never served old bytes.
#include "remote/disk/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "remote/disk_cache_fixture.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using testing::kBlock;
using testing::kBlockFile;
using testing::RandomBytes;
using DiskCacheTest = testing::DiskCacheFixture;

TEST_F(DiskCacheTest, RandomReadsAcrossBlocksMatchTheObjectAndHitOnTheSecondPass) {
  const std::vector<char> object = RandomBytes(kBlock * 10 + 123, 1);
  base_->Put("s3://b/x", object, "\"e1\"");
  auto fs = Cache();
  const auto file = fs->Open("s3://b/x");
  EXPECT_EQ(file->Size(), object.size());
  EXPECT_EQ(file->VersionStamp(), "\"e1\"");
  std::mt19937 rng(7);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 200; ++i) {
      const uint64_t offset = rng() % object.size();
      const size_t n = 1 + rng() % (3 * kBlock);
      std::vector<char> got(n);
      const size_t want = std::min<size_t>(n, object.size() - offset);
      ASSERT_EQ(file->ReadAt(offset, got.data(), n), want);
      ASSERT_EQ(0, std::memcmp(got.data(), object.data() + offset, want)) << offset << " " << n;
    }
    std::vector<char> all(object.size());
    ReadFully(*file, 0, all.data(), all.size(), "all");
    ASSERT_EQ(all, object);
  }
  EXPECT_EQ(base_->bytes_read.load(), static_cast<int64_t>(object.size()));
  const DiskCacheStats s = fs->stats();
  EXPECT_EQ(s.misses, 11);
  EXPECT_EQ(s.bytes_fetched, static_cast<int64_t>(object.size()));
  EXPECT_GT(s.hits, 0);
  // Another instance (another process's view) reads it all from disk.
  auto again = Cache();
  std::vector<char> all(object.size());
  ReadFully(*again->Open("s3://b/x"), 0, all.data(), all.size(), "all");
  EXPECT_EQ(all, object);
  EXPECT_EQ(again->stats().misses, 0);
  // Every block on disk: a file opened now, and the first once it has read them all, map the
  // object whole, as a local file maps.
  const auto reopened = again->Open("s3://b/x");
  for (const File* f : {reopened.get(), file.get()}) {
    ASSERT_NE(f->Map(), nullptr);
    EXPECT_EQ(0, std::memcmp(f->Map(), object.data(), object.size()));
  }
}

TEST_F(DiskCacheTest, ReadManyFetchesEveryMissingBlockInOneBaseReadMany) {
  const std::vector<char> object = RandomBytes(kBlock * 8, 2);
  base_->Put("s3://b/x", object, "e");
  auto fs = Cache();
  const auto file = fs->Open("s3://b/x");
  std::vector<char> a(100), b(kBlock + 10), c(5);
  const ReadRange ranges[] = {{kBlock * 6 + 3, a.data(), a.size()},
                              {kBlock - 5, b.data(), b.size()},
                              {kBlock * 3, c.data(), c.size()}};
  const int64_t calls = base_->read_calls.load();
  file->ReadMany(ranges, "ranges");
  EXPECT_EQ(base_->read_calls.load() - calls, 1);
  EXPECT_EQ(0, std::memcmp(a.data(), object.data() + kBlock * 6 + 3, a.size()));
  EXPECT_EQ(0, std::memcmp(b.data(), object.data() + kBlock - 5, b.size()));
  EXPECT_EQ(0, std::memcmp(c.data(), object.data() + kBlock * 3, c.size()));
  EXPECT_EQ(fs->stats().misses, 5);  // blocks 0, 1, 2, 3, 6
}

TEST_F(DiskCacheTest, ReadsPastTheEndAreShortOrRefused) {
  base_->Put("s3://b/x", RandomBytes(kBlock + 1, 3), "e");
  auto fs = Cache();
  const auto file = fs->Open("s3://b/x");
  char buf[16];
  EXPECT_EQ(file->ReadAt(kBlock, buf, sizeof(buf)), 1u);
  EXPECT_EQ(file->ReadAt(kBlock + 1, buf, sizeof(buf)), 0u);
  const ReadRange past{kBlock - 2, buf, sizeof(buf)};
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  file->ReadMany({&past, 1}, "the tail");
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_NE(message.find("s3://b/x"), std::string::npos) << message;
}

// Two instances over one folder stand for two processes: each block comes from the base
// exactly once, whichever fetched it, and the other waits and reads it from disk.
TEST_F(DiskCacheTest, TwoInstancesReadingAtOnceFetchEachBlockOnce) {
  const std::vector<char> object = RandomBytes(kBlock * 24 + 7, 4);
  base_->Put("s3://b/x", object, "e");
  base_->delay_us = 500;
  std::vector<std::shared_ptr<DiskCacheFileSystem>> caches = {Cache(), Cache()};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto file = caches[t % 2]->Open("s3://b/x");
      std::mt19937 rng(t);
      for (int i = 0; i < 60; ++i) {
        const uint64_t offset = rng() % object.size();
        const size_t n = std::min<size_t>(1 + rng() % (2 * kBlock), object.size() - offset);
        std::vector<char> got(n);
        ReadFully(*file, offset, got.data(), n, "read");
        if (std::memcmp(got.data(), object.data() + offset, n) != 0) bad.fetch_add(1);
      }
      std::vector<char> all(object.size());
      ReadFully(*file, 0, all.data(), all.size(), "all");
      if (all != object) bad.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(base_->bytes_read.load(), static_cast<int64_t>(object.size()));
  EXPECT_EQ(caches[0]->stats().misses + caches[1]->stats().misses, 25);
}

// The same across real processes: each child counts what its own base served.
TEST_F(DiskCacheTest, TwoProcessesReadingAtOnceFetchEachBlockOnce) {
  const std::vector<char> object = RandomBytes(kBlock * 16 + 5, 16);
  base_->Put("s3://b/x", object, "e");
  base_->delay_us = 2000;
  int fds[2];
  int go[2];  // both children start reading together
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 2; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int64_t fetched = -1;
      try {
        const auto file = Cache()->Open("s3://b/x");
        char start = 0;
        if (read(go[0], &start, 1) != 1) _exit(1);
        std::vector<char> all(object.size());
        for (uint64_t offset = 0; offset < all.size(); offset += kBlock) {
          ReadFully(*file, offset, all.data() + offset, std::min(kBlock, all.size() - offset),
                    "block");
        }
        if (all == object) fetched = base_->bytes_read.load();
      } catch (...) {
      }
      (void)!write(fds[1], &fetched, sizeof(fetched));
      _exit(0);
    }
    children.push_back(pid);
  }
  close(fds[1]);
  ASSERT_EQ(write(go[1], "gg", 2), 2);
  close(go[1]);
  close(go[0]);
  int64_t total = 0;
  for (int c = 0; c < 2; ++c) {
    int64_t fetched = -1;
    ASSERT_EQ(read(fds[0], &fetched, sizeof(fetched)), static_cast<ssize_t>(sizeof(fetched)));
    ASSERT_GE(fetched, 0) << "a child read wrong bytes or failed";
    total += fetched;
  }
  close(fds[0]);
  for (const pid_t pid : children) waitpid(pid, nullptr, 0);
  EXPECT_EQ(total, static_cast<int64_t>(object.size()));
}

TEST_F(DiskCacheTest, TemporaryOfAKilledWriterIsNeverServedAndIsRemoved) {
  const std::vector<char> object = RandomBytes(kBlock * 3, 5);
  base_->Put("s3://b/x", object, "e");
  auto fs = Cache();
  const auto file = fs->Open("s3://b/x");
  // What a downloader killed mid-write leaves: a temporary of block 1, wrong bytes.
  const std::string temp = ObjectDir() + "/1.tmp.99999.0";
  {
    std::vector<char> junk(kBlock, '\x5a');
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    close(fd);
  }
  // And a block cut short under its final name.
  {
    const int fd = open((ObjectDir() + "/2").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "short", 5), 5);
    close(fd);
  }
  std::vector<char> all(object.size());
  ReadFully(*file, 0, all.data(), all.size(), "all");
  EXPECT_EQ(all, object);
  EXPECT_EQ(fs->stats().misses, 3);
  EXPECT_EQ(std::filesystem::file_size(ObjectDir() + "/2"), kBlockFile);
  EXPECT_TRUE(std::filesystem::exists(temp));
  EXPECT_EQ(fs->CollectGarbage(), 3 * kBlockFile);
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_EQ(fs->stats().stale_removed, 1);
  EXPECT_EQ(DiskBytes(), 3 * kBlockFile);
}

TEST_F(DiskCacheTest, EvictionKeepsTheBudgetAndTakesTheLeastRecentlyReadFirst) {
  base_->Put("s3://b/x", RandomBytes(kBlock * 8, 6), "e");
  auto fs = Cache(3 * kBlockFile);
  const auto file = fs->Open("s3://b/x");
  for (uint64_t b = 0; b < 3; ++b) ReadBlock(*file, b);
  SetAge(0, 300);
  SetAge(1, 200);
  SetAge(2, 100);
  ReadBlock(*file, 0);  // now the most recently read
  ReadBlock(*file, 3);
  EXPECT_TRUE(HasBlock(0));
  EXPECT_FALSE(HasBlock(1));
  EXPECT_TRUE(HasBlock(2));
  EXPECT_TRUE(HasBlock(3));
  EXPECT_EQ(fs->stats().bytes_evicted, static_cast<int64_t>(kBlockFile));
  std::mt19937 rng(8);
  for (int i = 0; i < 40; ++i) {
    ReadBlock(*file, rng() % 8);
    ASSERT_LE(DiskBytes(), 3 * kBlockFile);
  }
}

TEST_F(DiskCacheTest, EvictionSkipsABlockAnotherReaderHolds) {
  base_->Put("s3://b/x", RandomBytes(kBlock * 8, 9), "e");
  auto fs = Cache(3 * kBlockFile);
  const auto file = fs->Open("s3://b/x");
  for (uint64_t b = 0; b < 3; ++b) ReadBlock(*file, b);
  SetAge(0, 300);
  SetAge(1, 200);
  SetAge(2, 100);
  // Another reader holds block 0 (the least recently read): its read lock, byte 0.
  const int lock = open((ObjectDir() + "/lock").c_str(), O_RDWR);
  ASSERT_GE(lock, 0);
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  ASSERT_EQ(fcntl(lock, F_OFD_SETLK, &fl), 0);
  ReadBlock(*file, 4);
  EXPECT_TRUE(HasBlock(0));
  EXPECT_FALSE(HasBlock(1));
  EXPECT_TRUE(HasBlock(4));
  close(lock);
  EXPECT_LE(DiskBytes(), 3 * kBlockFile);
}

TEST_F(DiskCacheTest, BlocksThatCannotFitAreServedWithoutBeingKept) {
  base_->Put("s3://b/x", RandomBytes(kBlock * 4, 10), "e");
  auto fs = Cache(kBlockFile);
  const auto file = fs->Open("s3://b/x");
  ReadBlock(*file, 0);
  const int lock = open((ObjectDir() + "/lock").c_str(), O_RDWR);
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_len = 1;
  ASSERT_EQ(fcntl(lock, F_OFD_SETLK, &fl), 0);  // block 0 held: nothing can be evicted
  std::vector<char> got(kBlock);
  ReadFully(*file, kBlock, got.data(), kBlock, "block 1");
  close(lock);
  EXPECT_FALSE(HasBlock(1));
  EXPECT_EQ(fs->stats().uncached, 1);
  EXPECT_LE(DiskBytes(), kBlockFile);
}

TEST_F(DiskCacheTest, ANewVersionNeverGetsTheOldVersionsBlocks) {
  const std::vector<char> v1 = RandomBytes(kBlock * 2, 11);
  const std::vector<char> v2 = RandomBytes(kBlock * 2, 12);
  base_->Put("s3://b/x", v1, "\"v1\"");
  auto fs = Cache();
  std::vector<char> got(v1.size());
  ReadFully(*fs->Open("s3://b/x"), 0, got.data(), got.size(), "v1");
  EXPECT_EQ(got, v1);
  base_->Put("s3://b/x", v2, "\"v2\"");
  ReadFully(*fs->Open("s3://b/x"), 0, got.data(), got.size(), "v2");
  EXPECT_EQ(got, v2);
  EXPECT_EQ(fs->stats().misses, 4);
  EXPECT_EQ(base_->bytes_read.load(), static_cast<int64_t>(v1.size() + v2.size()));
}

TEST_F(DiskCacheTest, AFailedFetchLeavesNoTemporaryAndIsRetried) {
  const std::vector<char> object = RandomBytes(kBlock * 2, 13);
  base_->Put("s3://b/x", object, "e");
  auto fs = Cache();
  const auto file = fs->Open("s3://b/x");
  base_->fail = true;
  std::vector<char> got(object.size());
  EXPECT_EQ(ErrorCodeOf([&] { ReadFully(*file, 0, got.data(), got.size(), "all"); }),
            ErrorCode::kIo);
  EXPECT_EQ(DiskBytes(), 0u);
  base_->fail = false;
  ReadFully(*file, 0, got.data(), got.size(), "all");
  EXPECT_EQ(got, object);
}

TEST_F(DiskCacheTest, ABudgetBelowOneBlockIsRefusedNamingTheBudget) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { Cache(1000); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("1000"), std::string::npos) << message;
}

TEST_F(DiskCacheTest, FolderIsThisUsersOwnAndFilesArePrivate) {
  base_->Put("s3://b/x", RandomBytes(kBlock, 14), "e");
  auto fs = Cache();
  ReadBlock(*fs->Open("s3://b/x"), 0);
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((ObjectDir() + "/0").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { Cache(); }, &message), ErrorCode::kIo);
  EXPECT_NE(message.find("0755"), std::string::npos) << message;
}

TEST_F(DiskCacheTest, AFileWithoutAVersionIsNotCached) {
  base_->Put("s3://b/x", RandomBytes(kBlock, 15), "");
  auto fs = Cache();
  const auto file = fs->Open("s3://b/x");
  ReadBlock(*file, 0);
  ReadBlock(*file, 0);
  EXPECT_EQ(base_->bytes_read.load(), static_cast<int64_t>(2 * kBlock));
  EXPECT_EQ(fs->stats().misses, 0);
}

}  // namespace
}  // namespace gpufeed
