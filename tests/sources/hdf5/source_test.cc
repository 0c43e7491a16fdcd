// The HDF5 source reads exactly what h5py reads: every layout, filter combination, dtype and
// chunk shape of hdf5_test_files.h, in shuffled batches from two threads at once.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "gpufeed/dtype.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/sources.h"
#include "sources/hdf5/fixture.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using testing::Hdf5Files;

std::vector<std::string> DatasetsOf(const Hdf5Files& files, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& e : files.manifest().at(name)) out.push_back(e.at("dataset"));
  return out;
}

// Reads every sample of `source` once, in a shuffled order, in batches of `batch` split
// between two threads; returns each field's bytes in sample order.
std::vector<std::string> ReadAll(const Source& source, int64_t batch, uint64_t seed) {
  const int64_t n = source.size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const auto& fields = source.schema().fields;
  std::vector<std::string> out(fields.size());
  for (size_t f = 0; f < fields.size(); ++f) out[f].assign(n * fields[f].SampleBytes(), '\xee');
  auto worker = [&](int id) {
    auto state = source.NewWorkerState();
    std::vector<std::vector<std::byte>> rows(fields.size());
    for (int64_t b = id; b * batch < n; b += 2) {
      const int64_t begin = b * batch, end = std::min(n, begin + batch);
      std::span<const int64_t> idx(order.data() + begin, end - begin);
      BatchView view;
      view.rows = end - begin;
      for (size_t f = 0; f < fields.size(); ++f) {
        rows[f].assign(view.rows * fields[f].SampleBytes(), std::byte{0xcd});
        view.fields.push_back(rows[f].data());
      }
      source.Read(idx, view, state.get());
      for (size_t f = 0; f < fields.size(); ++f) {
        const size_t sb = fields[f].SampleBytes();
        for (int64_t i = 0; i < view.rows; ++i) {
          std::memcpy(out[f].data() + idx[i] * sb, rows[f].data() + i * sb, sb);
        }
      }
    }
  };
  std::thread t(worker, 1);
  worker(0);
  t.join();
  return out;
}

// The first sample where `got` and `want` differ, for a readable failure.
std::string FirstDifference(const std::string& got, const std::string& want, size_t sample_bytes) {
  if (got.size() != want.size()) return fmt::format("sizes {} vs {}", got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i])
      return fmt::format("sample {} byte {}", i / sample_bytes, i % sample_bytes);
  }
  return "";
}

class Hdf5CaseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Hdf5CaseTest, EverySampleEqualsWhatH5pyReads) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const std::string name = GetParam();
  const auto datasets = DatasetsOf(*files, name);
  const Hdf5Options configs[] = {
      {},                                                     // decoded-chunk cache
      {.file_system = nullptr, .chunk_cache_bytes = 0},       // no cache
      {.file_system = nullptr, .chunk_cache_bytes = 100000},  // < some chunks
  };
  for (const auto& options : configs) {
    const bool first_config = &options == &configs[0];
    auto source = OpenHdf5({files->File(name)}, datasets, options);
    const auto& entries = files->manifest().at(name);
    ASSERT_EQ(source->schema().fields.size(), entries.size());
    for (size_t f = 0; f < entries.size(); ++f) {
      const FieldSpec& spec = source->schema().fields[f];
      std::vector<int64_t> shape = entries[f].at("shape");
      EXPECT_EQ(DTypeName(spec.dtype), entries[f].at("dtype").get<std::string>()) << spec.name;
      EXPECT_EQ(source->size(), shape[0]);
      EXPECT_EQ(spec.shape, std::vector<int64_t>(shape.begin() + 1, shape.end())) << spec.name;
    }
    // Batches of one sample decode a whole chunk per sample without a cache: only with one.
    std::vector<int64_t> batches{37, source->size()};
    if (first_config) batches.push_back(1);
    for (int64_t batch : batches) {
      const auto got = ReadAll(*source, batch, static_cast<uint64_t>(batch));
      for (size_t f = 0; f < entries.size(); ++f) {
        const std::string want = files->Expected(name, datasets[f]);
        EXPECT_TRUE(got[f] == want)
            << name << ": " << datasets[f] << " (batch " << batch << ", cache "
            << options.chunk_cache_bytes << "): first difference at "
            << FirstDifference(got[f], want, source->schema().fields[f].SampleBytes());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, Hdf5CaseTest,
                         ::testing::Values("plain", "gzip", "h5py_defaults", "multi_axis", "dtypes",
                                           "fill", "fletcher", "compact", "latest", "latest_index",
                                           "dense_groups", "userblock", "btree", "scaleoffset",
                                           "groups"));

TEST(Hdf5SourceTest, FilesConcatenateInOrder) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto source = OpenHdf5({files->File("gzip"), files->File("second")}, {"mel", "label"});
  ASSERT_EQ(source->size(), 1333);
  const auto got = ReadAll(*source, 100, 3);
  EXPECT_TRUE(got[0] == files->Expected("gzip", "mel") + files->Expected("second", "mel"));
  EXPECT_TRUE(got[1] == files->Expected("gzip", "label") + files->Expected("second", "label"));
  EXPECT_THAT(source->Describe(), ::testing::HasSubstr("1333 samples"));
}

TEST(Hdf5SourceTest, EmptyDatasetListTakesEveryDatasetSorted) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto source = OpenHdf5({files->File("plain")}, {});
  ASSERT_EQ(source->schema().fields.size(), 2u);
  EXPECT_EQ(source->schema().fields[0].name, "label");
  EXPECT_EQ(source->schema().fields[1].name, "mel");
}

TEST(Hdf5SourceTest, OpenPathOpensHdf5Files) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto source = OpenPath(files->File("gzip"), {"label"});
  EXPECT_EQ(source->size(), 1000);
  EXPECT_EQ(source->schema().ToString(), "label: int64[]");
  EXPECT_THAT(source->Describe(), ::testing::StartsWith("hdf5:"));
}

TEST(Hdf5SourceTest, PreferredBlockIsTheChunkLengthAlongAxisZero) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  EXPECT_EQ(OpenHdf5({files->File("gzip")}, {"mel"})->PreferredBlock(), 256);
  EXPECT_EQ(OpenHdf5({files->File("plain")}, {"mel"})->PreferredBlock(), 1);
  EXPECT_EQ(OpenHdf5({files->File("multi_axis")}, {"x"})->PreferredBlock(), 7);
  // The first chunked field decides, whatever comes before it.
  EXPECT_EQ(OpenHdf5({files->File("userblock")}, {"a", "b"})->PreferredBlock(), 8);
}

TEST(Hdf5SourceTest, IdentityChangesWithTheFilesAndDatasets) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const auto a = OpenHdf5({files->File("gzip")}, {"mel", "label"})->Identity();
  EXPECT_EQ(a, OpenHdf5({files->File("gzip")}, {"mel", "label"})->Identity());
  EXPECT_NE(a, OpenHdf5({files->File("gzip")}, {"mel"})->Identity());
  EXPECT_NE(a, OpenHdf5({files->File("plain")}, {"mel", "label"})->Identity());
}

TEST(Hdf5SourceTest, UnsupportedFilterFallsBackToLibraryReads) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  ::testing::internal::CaptureStderr();
  auto source = OpenHdf5({files->File("scaleoffset")}, {"s", "t"});
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(warning, ::testing::HasSubstr("dataset s uses filter scaleoffset"));
  EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1);
  ReadAll(*source, 50, 1);
  EXPECT_EQ(Hdf5SourceCounters(*source).library_reads, 200);
}

TEST(Hdf5SourceTest, CountersBelongToHdf5Sources) {
  auto other = OpenSynthetic(ParseSchema("x:float32[2]"), 10);
  EXPECT_EQ(testing::ErrorCodeOf([&] { Hdf5SourceCounters(*other); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufeed
