// The contiguous HDF5 read path: rows from the warming file mapping and by pread give the
// same bytes at every split, the file's last rows included; a file truncated after open is
// an error naming it, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "core/io/fault_file.h"
#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

constexpr hsize_t kRows = 4100;  // of 8 KiB: just over WarmedMapping::kMinWarmedBytes
constexpr hsize_t kRowBytes = 8192;

// The warmer is opt-in (GPUFEED_MAPPING_WARMER=1); these tests are about it.
const bool kWarmerOn = setenv("GPUFEED_MAPPING_WARMER", "1", 1) == 0;

uint8_t Pattern(hsize_t row, hsize_t byte) { return static_cast<uint8_t>(row * 31 + byte * 7); }

void WriteContiguous(const std::string& path) {
  std::vector<uint8_t> data(kRows * kRowBytes);
  for (hsize_t r = 0; r < kRows; ++r) {
    for (hsize_t b = 0; b < kRowBytes; ++b) data[r * kRowBytes + b] = Pattern(r, b);
  }
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {kRows, kRowBytes};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t ds =
      H5Dcreate2(file, "x", H5T_NATIVE_UINT8, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(file);
}

std::vector<int64_t> Indices() {
  std::vector<int64_t> all(kRows);
  for (hsize_t i = 0; i < kRows; ++i) all[i] = static_cast<int64_t>(i);
  std::mt19937 rng(3);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(200);
  for (int64_t tail : {int64_t{kRows} - 2, int64_t{kRows} - 1, int64_t{kRows} - 1, int64_t{0}}) {
    all.push_back(tail);
  }
  return all;
}

std::vector<uint8_t> ReadAll(const Source& source, const std::vector<int64_t>& indices) {
  std::vector<uint8_t> out(indices.size() * kRowBytes, 0xEE);
  BatchView view;
  view.rows = static_cast<int64_t>(indices.size());
  view.fields.push_back(reinterpret_cast<std::byte*>(out.data()));
  source.Read(indices, view, nullptr);
  return out;
}

TEST(Hdf5Warm, MappingAndPreadGiveEqualBytesAtEverySplit) {
  testing::ScratchDir dir;
  const std::string path = dir.path() + "/big.h5";
  WriteContiguous(path);
  const auto indices = Indices();
  // The fault-injecting file system maps nothing: every read is a pread, in short pieces.
  auto short_reads = std::make_shared<FaultInjectingFileSystem>(
      DefaultFileSystem(), FaultRules{.max_bytes_per_read = 5000});
  const auto pread = OpenHdf5({path}, {"x"}, {.file_system = short_reads});
  const std::vector<uint8_t> expected = ReadAll(*pread, indices);
  for (size_t i = 0; i < indices.size(); ++i) {
    for (hsize_t b = 0; b < kRowBytes; b += 511) {
      ASSERT_EQ(expected[i * kRowBytes + b], Pattern(static_cast<hsize_t>(indices[i]), b));
    }
  }
  EXPECT_GT(short_reads->reads(), 0);
  for (int round = 0; round < 2; ++round) {
    const auto mapped = OpenHdf5({path}, {"x"});
    std::atomic<int> wrong{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 2; ++t) {
      readers.emplace_back([&] {
        for (int i = 0; i < 10; ++i) {
          if (ReadAll(*mapped, indices) != expected) ++wrong;
        }
      });
    }
    for (auto& th : readers) th.join();
    EXPECT_EQ(wrong.load(), 0);
  }
}

TEST(Hdf5Warm, FileTruncatedAfterOpenIsAnErrorNamingTheFile) {
  testing::ScratchDir dir;
  const std::string path = dir.path() + "/big.h5";
  for (bool read_before : {false, true}) {
    WriteContiguous(path);
    const auto source = OpenHdf5({path}, {"x"});
    const std::vector<int64_t> indices{0, 1, int64_t{kRows} - 1};
    if (read_before) ReadAll(*source, indices);  // the warmer runs while the file shrinks
    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
    std::string message;
    const ErrorCode code = testing::ErrorCodeOf([&] { ReadAll(*source, indices); }, &message);
    EXPECT_EQ(code, ErrorCode::kIo) << message;
    EXPECT_THAT(message, ::testing::HasSubstr("big.h5"));
    EXPECT_THAT(message, ::testing::HasSubstr("changed size"));
  }
}

}  // namespace
}  // namespace gpufeed
