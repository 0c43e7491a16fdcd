// Hostile .npy files and files that change under a mapping. Each crafted file is
// made here, byte by byte, and each must become an Error with its code and a message naming
// the file and what was wrong: never a crash, a hang or wrong data.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::RawNpy;
using testing::ScratchDir;

std::string Dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

TEST(HostileNpyTest, AnEmptyArrayWithAnOverflowingSampleShapeIsRefused) {
  ScratchDir dir;
  // (0, 2^62, 2^62): zero samples, so zero data bytes, but a sample of 2^124 elements.
  const std::string path =
      dir.Write("x.npy", RawNpy(1, Dict("(0, 4611686018427387904, 4611686018427387904)"), ""));
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr(path), HasSubstr("overflow")));
}

TEST(HostileNpyTest, ZeroWidthRowsAreRefused) {
  ScratchDir dir;
  // (2^61, 0): 2^61 samples of nothing in an empty file.
  const std::string path = dir.Write("x.npy", RawNpy(1, Dict("(2305843009213693952, 0)"), ""));
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kUnsupported);
  EXPECT_THAT(message, AllOf(HasSubstr(path), HasSubstr("zero bytes")));
}

TEST(HostileNpyTest, AShapeWhoseByteCountWrapsIsRefused) {
  ScratchDir dir;
  // 2^62 samples of 4 bytes: 2^64 bytes, which wraps to 0 = the bytes present.
  const std::string path = dir.Write("x.npy", RawNpy(1, Dict("(4611686018427387904,)"), ""));
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr(path), HasSubstr("more than 2^64")));
}

// A mapped file truncated under a reader (np.save to the same path writes
// in place) was a SIGBUS that killed the process.
TEST(HostileNpyTest, AMappedFileTruncatedWhileReadIsAnIoErrorOnTheReadingThread) {
  ScratchDir dir;
  const int64_t samples = 4096;
  const FieldSpec x{"x", DType::kFloat32, {256}};  // 1 KiB rows, 4 MiB in all
  std::vector<float> values(static_cast<size_t>(samples) * 256, 1.5f);
  WriteNpy(dir.Path("x.npy"), x, samples, values.data());
  auto source = OpenNumpy(dir.path(), {.use_mmap = true});
  std::vector<float> row(256);
  const int64_t last = samples - 1;
  BatchView view{{reinterpret_cast<std::byte*>(row.data())}, 1};
  source->Read({&last, 1}, view, nullptr);  // mapped and readable
  EXPECT_EQ(row[0], 1.5f);
  ASSERT_EQ(truncate(dir.Path("x.npy").c_str(), 128), 0);
  // The fault happens on a worker thread; the error is thrown there.
  std::string message;
  ErrorCode code = ErrorCode::kCancelled;
  std::thread worker([&] {
    code = ErrorCodeOf([&] { source->Read({&last, 1}, view, nullptr); }, &message);
  });
  worker.join();
  EXPECT_EQ(code, ErrorCode::kIo);
  EXPECT_THAT(message,
              AllOf(HasSubstr(dir.Path("x.npy")), HasSubstr("changed size while being read")));
  // The guard is reusable: the same read on this thread fails the same way, and a row still
  // inside the file's first page reads (as the zeros past its new end).
  EXPECT_EQ(ErrorCodeOf([&] { source->Read({&last, 1}, view, nullptr); }), ErrorCode::kIo);
  const int64_t first = 0;
  EXPECT_NO_THROW(source->Read({&first, 1}, view, nullptr));
}

}  // namespace
}  // namespace gpufeed
