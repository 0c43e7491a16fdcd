#include "gpufeed/file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/io/fault_file.h"
#include "error_code_of.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;

using ::testing::HasSubstr;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpufeed-file-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return path;
  }
  // 0, 1, 2, ... 255, 0, 1, ...: every offset holds a known byte.
  static std::string Pattern(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i % 251);
    return s;
  }

  std::string dir_;
};

TEST_F(FileTest, OpenMissingFileIsNotFoundNamingThePath) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { PosixFileSystem()->Open(dir_ + "/nope.bin"); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("nope.bin"));
  EXPECT_EQ(ErrorCodeOf([&] { PosixFileSystem()->Open(dir_ + "/no/such/dir/x"); }),
            ErrorCode::kNotFound);
}

TEST_F(FileTest, OpenFolderIsInvalidArgument) {
  EXPECT_EQ(ErrorCodeOf([&] { PosixFileSystem()->Open(dir_); }), ErrorCode::kInvalidArgument);
}

TEST_F(FileTest, ReadAtReadsAtOffsetsAndStopsAtTheEnd) {
  const std::string data = Pattern(1000);
  const auto file = PosixFileSystem()->Open(Write("a.bin", data));
  EXPECT_EQ(file->Size(), 1000u);
  EXPECT_THAT(file->path(), HasSubstr("a.bin"));
  EXPECT_GT(file->ModificationTimeNs(), 0);

  std::string buf(100, '\0');
  ASSERT_EQ(file->ReadAt(300, buf.data(), 100), 100u);
  EXPECT_EQ(buf, data.substr(300, 100));
  // Past the end: a short read, then nothing.
  ASSERT_EQ(file->ReadAt(950, buf.data(), 100), 50u);
  EXPECT_EQ(buf.substr(0, 50), data.substr(950));
  EXPECT_EQ(file->ReadAt(1000, buf.data(), 100), 0u);
  EXPECT_EQ(file->ReadAt(5000, buf.data(), 100), 0u);
}

TEST_F(FileTest, MapGivesTheFileBytesOnceForAllThreads) {
  const std::string data = Pattern(100'000);
  const auto file = PosixFileSystem()->Open(Write("m.bin", data));
  std::vector<const std::byte*> seen(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] { seen[t] = file->Map(); });
  }
  for (auto& t : threads) t.join();
  ASSERT_NE(seen[0], nullptr);
  for (const auto* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(seen[0]), data.size()), data);
}

// Files of 2 MiB and more map at a 2 MiB boundary (so 2 MiB page-cache folios map whole),
// inside a reservation whose ends are given back: the bytes are the file's (the last, partly
// filled page included), nothing around the mapping stays reserved, and the File's end
// unmaps it all.
TEST_F(FileTest, LargeFilesMapAtA2MiBBoundaryAndLeaveNoReservationBehind) {
  constexpr size_t kHuge = size_t{2} << 20;
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (const size_t size : {kHuge, 3 * kHuge + 123}) {
    const std::string data = Pattern(size);
    const std::string path = Write("big.bin", data);
    const std::byte* map = nullptr;
    {
      const auto file = PosixFileSystem()->Open(path);
      map = file->Map();
      ASSERT_NE(map, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(map) % kHuge, 0u) << size;
      EXPECT_EQ(std::memcmp(map, data.data(), size), 0) << size;
      const auto at = [](const std::byte* p) {
        return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
      };
      unsigned char v = 0;
      const size_t end = (size + page - 1) / page * page;
      // mincore answers ENOMEM for an address nothing maps: the reservation's end past the
      // file (at least a page: the reservation is a huge page longer) is given back.
      EXPECT_NE(mincore(at(map + end), page, &v), 0) << "after the file, size " << size;
      EXPECT_EQ(errno, ENOMEM);
    }
    unsigned char v = 0;
    EXPECT_NE(mincore(const_cast<std::byte*>(map), page, &v), 0) << "unmapped with the File";
  }
}

// PreferHugePages may drop the range's cached pages (where they are small) for the mapping to
// read them back in 2 MiB pages: whatever the kernel does, the mapping and ReadAt still give
// the file's bytes, and ranges past the end or of nothing are ignored.
TEST_F(FileTest, PreferHugePagesLeavesTheBytesAsTheyAre) {
  constexpr size_t kHuge = size_t{2} << 20;
  const std::string data = Pattern(3 * kHuge + 777);
  const auto file = PosixFileSystem()->Open(Write("prefer.bin", data));
  const std::byte* map = file->Map();
  ASSERT_NE(map, nullptr);
  ASSERT_EQ(std::memcmp(map, data.data(), data.size()), 0);  // cached now, by this mapping
  file->PreferHugePages(128, data.size() - 128);
  file->PreferHugePages(0, std::numeric_limits<uint64_t>::max());
  file->PreferHugePages(data.size(), 10);
  file->PreferHugePages(data.size() + 5, 0);
  file->PreferHugePages(5, 0);
  EXPECT_EQ(std::memcmp(map, data.data(), data.size()), 0);
  std::string back(data.size(), '\0');
  ASSERT_EQ(file->ReadAt(0, back.data(), back.size()), data.size());
  EXPECT_EQ(back, data);
  // A file that does not map (the fault-injecting one) takes the call and does nothing.
  FaultInjectingFileSystem fs(PosixFileSystem());
  const auto faulty = fs.Open(Write("f.bin", data));
  faulty->PreferHugePages(0, data.size());
  EXPECT_EQ(faulty->Map(), nullptr);
}

TEST_F(FileTest, MapOfAnEmptyFileIsNonNull) {
  const auto file = PosixFileSystem()->Open(Write("empty.bin", ""));
  EXPECT_EQ(file->Size(), 0u);
  EXPECT_NE(file->Map(), nullptr);
  char c;
  EXPECT_EQ(file->ReadAt(0, &c, 1), 0u);
}

TEST_F(FileTest, ReadFullyReadsExactlyOrSaysWhereTheFileEnds) {
  const std::string data = Pattern(64);
  const auto file = PosixFileSystem()->Open(Write("r.bin", data));
  std::string buf(32, '\0');
  ReadFully(*file, 16, buf.data(), 32, "test bytes");
  EXPECT_EQ(buf, data.substr(16, 32));

  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ReadFully(*file, 40, buf.data(), 32, "test bytes"); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("r.bin"));
  EXPECT_THAT(message, HasSubstr("test bytes"));
  EXPECT_THAT(message, HasSubstr("offset 40"));
}

// A local file that says it can be read together with the other GroupedFiles (BatchKey), so
// that ReadFiles hands them to File's default ReadBatch.
class GroupedFile final : public File {
 public:
  explicit GroupedFile(std::unique_ptr<File> local) : local_(std::move(local)) {}
  const std::string& path() const override { return local_->path(); }
  uint64_t Size() const override { return local_->Size(); }
  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    return local_->ReadAt(offset, buf, n);
  }
  const std::byte* Map() const override { return nullptr; }
  const void* BatchKey() const override {
    static const int key = 0;
    return &key;
  }

 private:
  std::unique_ptr<File> local_;
};

TEST_F(FileTest, ReadFilesHandsOverEachReadAsItCompletesAndRaisesTheFirstFailureAfter) {
  const std::string a = Pattern(100), b = Pattern(300), c = Pattern(50), d = Pattern(200);
  const auto fs = PosixFileSystem();
  GroupedFile fa(fs->Open(Write("a", a)));
  const auto fb = fs->Open(Write("b", b));  // not grouped: read on its own
  GroupedFile fc(fs->Open(Write("c", c)));
  GroupedFile fd(fs->Open(Write("d", d)));
  std::vector<std::string> got(4);
  got[0].resize(a.size());
  got[1].resize(b.size());
  got[2].resize(c.size() + 1);  // past its end: fails
  got[3].resize(d.size());
  const std::vector<FileRead> reads = {{&fa, 0, got[0].data(), got[0].size()},
                                       {fb.get(), 0, got[1].data(), got[1].size()},
                                       {&fc, 0, got[2].data(), got[2].size()},
                                       {&fd, 0, got[3].data(), got[3].size()}};
  std::vector<size_t> handed;
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  ReadFiles(reads, "part", [&](size_t i) {
                    handed.push_back(i);
                    EXPECT_EQ(got[i], (std::vector<std::string>{a, b, c, d}[i]));
                  });
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr(dir_ + "/c: part"));
  // The group {a, c, d} is read first; d is read and handed over although c failed; b, in a
  // group after the failed one, is not read.
  EXPECT_EQ(handed, (std::vector<size_t>{0, 3}));

  handed.clear();
  got[2].resize(c.size());
  const std::vector<FileRead> good = {{&fa, 0, got[0].data(), got[0].size()},
                                      {fb.get(), 0, got[1].data(), got[1].size()},
                                      {&fc, 0, got[2].data(), got[2].size()}};
  ReadFiles(good, "part", [&](size_t i) { handed.push_back(i); });
  EXPECT_EQ(handed, (std::vector<size_t>{0, 2, 1}));
  EXPECT_EQ(got[2], c);
}

TEST_F(FileTest, FaultFileNeverMaps) {
  FaultInjectingFileSystem fs(PosixFileSystem());
  const auto file = fs.Open(Write("f.bin", Pattern(10)));
  EXPECT_EQ(file->Map(), nullptr);
  EXPECT_EQ(file->Size(), 10u);
}

TEST_F(FileTest, FaultShortReadsStillReadFully) {
  const std::string data = Pattern(1000);
  FaultInjectingFileSystem fs(PosixFileSystem(), {.max_bytes_per_read = 7});
  const auto file = fs.Open(Write("s.bin", data));
  std::string one(100, '\0');
  EXPECT_EQ(file->ReadAt(0, one.data(), 100), 7u);
  std::string buf(1000, '\0');
  const int64_t before = fs.reads();
  ReadFully(*file, 0, buf.data(), buf.size(), "all");
  EXPECT_EQ(buf, data);
  EXPECT_EQ(fs.reads() - before, (1000 + 6) / 7);
}

TEST_F(FileTest, FaultEioAfterNReadsNamesPathAndOffset) {
  FaultInjectingFileSystem fs(PosixFileSystem(), {.eio_after_reads = 2});
  const auto file = fs.Open(Write("e.bin", Pattern(100)));
  char buf[10];
  EXPECT_EQ(file->ReadAt(0, buf, 10), 10u);
  EXPECT_EQ(file->ReadAt(10, buf, 10), 10u);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { file->ReadAt(20, buf, 10); }, &message), ErrorCode::kIo);
  EXPECT_THAT(message, HasSubstr("e.bin"));
  EXPECT_THAT(message, HasSubstr("offset 20"));
  // Every later read fails too, until the rules change; the count restarts then.
  EXPECT_EQ(ErrorCodeOf([&] { file->ReadAt(0, buf, 10); }), ErrorCode::kIo);
  fs.SetRules({.eio_after_reads = 1});
  EXPECT_EQ(file->ReadAt(0, buf, 10), 10u);
  EXPECT_EQ(ErrorCodeOf([&] { file->ReadAt(0, buf, 10); }), ErrorCode::kIo);
  fs.SetRules({});
  EXPECT_EQ(file->ReadAt(0, buf, 10), 10u);
  EXPECT_EQ(fs.reads(), 7);
}

TEST_F(FileTest, FaultEioCountIsExactAcrossThreads) {
  FaultInjectingFileSystem fs(PosixFileSystem(), {.eio_after_reads = 100});
  const auto file = fs.Open(Write("t.bin", Pattern(4096)));
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      char buf[16];
      for (int i = 0; i < 50; ++i) {
        try {
          file->ReadAt(static_cast<uint64_t>(i) * 16, buf, sizeof(buf));
          ++ok;
        } catch (const Error&) {
          ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
  EXPECT_EQ(failed.load(), 300);
  EXPECT_EQ(fs.reads(), 400);
}

TEST_F(FileTest, FaultDelaySlowsEveryRead) {
  FaultInjectingFileSystem fs(PosixFileSystem(), {.delay_us = 20'000});
  const auto file = fs.Open(Write("d.bin", Pattern(10)));
  char buf[10];
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(file->ReadAt(0, buf, 10), 10u);
  EXPECT_EQ(file->ReadAt(0, buf, 10), 10u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(40));
  EXPECT_EQ(fs.rules().delay_us, 20'000);
}

TEST_F(FileTest, FaultFileOutlivesItsFileSystem) {
  std::unique_ptr<File> file;
  {
    FaultInjectingFileSystem fs(PosixFileSystem(), {.max_bytes_per_read = 3});
    file = fs.Open(Write("o.bin", Pattern(10)));
  }
  char buf[10];
  EXPECT_EQ(file->ReadAt(0, buf, 10), 3u);
}

TEST_F(FileTest, FaultOpenOfMissingFileIsNotFound) {
  FaultInjectingFileSystem fs(PosixFileSystem());
  EXPECT_EQ(ErrorCodeOf([&] { fs.Open(dir_ + "/missing"); }), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace gpufeed
