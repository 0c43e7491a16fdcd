// The filters h5py users add (LZF, Blosc with its codecs and shuffles, LZ4, Bitshuffle with
// LZ4 or Zstd, Zstd) and deflate through libdeflate: values equal what h5py reads (or what was
// written, for the chains Debian's hdf5plugin cannot read), read without libhdf5; a corrupt
// chunk of each kind is an error naming the dataset and the chunk; a filter nobody decodes is
// an error naming the filter and its package.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
// AddressSanitizer's leak checker, under g++ (__SANITIZE_ADDRESS__) and clang (__has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define GPUFEED_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUFEED_TEST_LSAN 1
#endif
#endif
#ifdef GPUFEED_TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/filters/codecs.h"
#include "sources/hdf5/test_files.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

class CompressedFiles {
 public:
  static const CompressedFiles* Get() {
    static std::unique_ptr<CompressedFiles> files = [] {
      std::unique_ptr<CompressedFiles> f;
      f = std::make_unique<CompressedFiles>();
      std::string error;
      f->dir_ = testing::SharedScriptOutput("hdf5_compressed", GPUFEED_COMPRESSED_HDF5_SCRIPT,
                                            &error);
      if (f->dir_.empty()) {
        f.reset();
        if (!testing::HaveH5py()) return f;
        ADD_FAILURE() << "could not write the compressed test files: " << error;
        return f;
      }
      f->manifest_ = nlohmann::json::parse(testing::ReadWholeFile(f->dir_ + "/manifest.json"));
      return f;
    }();
    return files.get();
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const nlohmann::json& manifest() const { return manifest_; }

 private:
  std::string dir_;
  nlohmann::json manifest_;
};

#define REQUIRE_FILES(files)                             \
  const CompressedFiles* files = CompressedFiles::Get(); \
  if (files == nullptr) GTEST_SKIP() << "Debian's h5py and hdf5plugin are unavailable"

// Every sample of `source`, read in a shuffled order in batches of 64, in sample order.
std::string ReadAll(const Source& source) {
  const int64_t n = source.size();
  const size_t sb = source.schema().fields[0].SampleBytes();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  std::string out(n * sb, '\xee');
  auto state = source.NewWorkerState();
  std::vector<std::byte> rows;
  for (int64_t begin = 0; begin < n; begin += 64) {
    const int64_t end = std::min(n, begin + 64);
    std::span<const int64_t> idx(order.data() + begin, end - begin);
    rows.assign((end - begin) * sb, std::byte{0xcd});
    BatchView view;
    view.rows = end - begin;
    view.fields.push_back(rows.data());
    source.Read(idx, view, state.get());
    for (int64_t i = 0; i < view.rows; ++i) {
      std::memcpy(out.data() + idx[i] * sb, rows.data() + i * sb, sb);
    }
  }
  return out;
}

class CompressedChainTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CompressedChainTest, ValuesEqualH5pyWithoutLibhdf5) {
  REQUIRE_FILES(files);
  const std::string name = GetParam();
  auto source = OpenHdf5({files->Path("compressed.h5")}, {name});
  EXPECT_EQ(ReadAll(*source), testing::ReadWholeFile(files->Path(name + ".bin")));
  const Hdf5Counters c = Hdf5SourceCounters(*source);
  EXPECT_EQ(c.library_reads, 0) << "decoded by gpufeed, not through libhdf5";
  EXPECT_GT(c.chunks_decoded, 0);
}

TEST_P(CompressedChainTest, CorruptChunkIsAnErrorNamingDatasetAndChunk) {
  REQUIRE_FILES(files);
  const std::string name = GetParam();
  if (files->manifest().at(name).at("filter_mask") != 0) {
    GTEST_SKIP() << "chunk 1 was stored with its filter skipped";
  }
  auto source = OpenHdf5({files->Path("corrupt.h5")}, {name});
  std::string message;
  EXPECT_EQ(testing::ErrorCodeOf([&] { ReadAll(*source); }, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("dataset " + name + ": chunk 1 at ["));
  EXPECT_THAT(message, HasSubstr("corrupt.h5"));
}

INSTANTIATE_TEST_SUITE_P(Chains, CompressedChainTest,
                         ::testing::Values("gzip_shuffle", "gzip_fletcher", "lzf", "lzf_noise",
                                           "blosc_lz4_bitshuffle", "blosc_zstd", "blosc_zlib",
                                           "lz4", "lz4_blocks", "bitshuffle_lz4",
                                           "bitshuffle_lz4_small", "bitshuffle_zstd", "zstd"));

TEST(Hdf5CompressedTest, InspectMeasuresEachChainsDecodeRate) {
  REQUIRE_FILES(files);
  const Hdf5Inspection in = InspectHdf5(files->Path("compressed.h5"));
  ASSERT_EQ(in.datasets.size(), 13u);
  for (const auto& d : in.datasets) {
    EXPECT_GT(d.decode_chunks_sampled, 0) << d.dataset;
    EXPECT_GT(d.decode_mb_per_s, 0) << d.dataset;
    EXPECT_TRUE(d.decode_error.empty()) << d.dataset << ": " << d.decode_error;
  }
  EXPECT_THAT(FormatHdf5Inspection(in), HasSubstr("MB/s of output on one thread (blosc zstd"));
  // A damaged sampled chunk is reported, not thrown.
  const Hdf5Inspection bad = InspectHdf5(files->Path("corrupt.h5"));
  EXPECT_THAT(bad.datasets.front().decode_error, HasSubstr("bitshuffle"));  // bitshuffle_lz4
}

TEST(Hdf5CompressedTest, NoisyLzfChunksAreStoredWithTheFilterSkipped) {
  REQUIRE_FILES(files);
  // What the lzf_noise case is for: the filter mask path, not only the decoder.
  EXPECT_NE(files->manifest().at("lzf_noise").at("filter_mask"), 0);
}

TEST(Hdf5CompressedTest, ZlibAndLibdeflateInflateTheSameValues) {
  REQUIRE_FILES(files);
  auto source = OpenHdf5({files->Path("compressed.h5")}, {"gzip_shuffle"});
  const std::string expected = testing::ReadWholeFile(files->Path("gzip_shuffle.bin"));
  SetHdf5InflateWithZlib(true);
  const std::string with_zlib = ReadAll(*source);
  SetHdf5InflateWithZlib(false);
  EXPECT_EQ(with_zlib, expected);
  EXPECT_EQ(ReadAll(*source), expected);
}

TEST(Hdf5CompressedTest, FilterNobodyDecodesNamesItsIdNameAndPackage) {
  REQUIRE_FILES(files);
  std::string message;
#ifdef GPUFEED_TEST_LSAN
  // Looking for the filter, libhdf5 dlopens every plugin in its plugin path, and one of
  // Debian's plugins leaks 8 bytes in its initializer: not gpufeed's allocation.
  __lsan_disable();
#endif
  EXPECT_EQ(testing::ErrorCodeOf([&] { OpenHdf5({files->Path("unknown.h5")}, {"x"}); }, &message),
            ErrorCode::kUnsupported);
#ifdef GPUFEED_TEST_LSAN
  __lsan_enable();
#endif
  EXPECT_THAT(message, HasSubstr("dataset x"));
  EXPECT_THAT(message, HasSubstr("filter 32026 (blosc2)"));
  EXPECT_THAT(message, HasSubstr("pip: hdf5plugin"));
}

}  // namespace
}  // namespace gpufeed
