// `gpufeed inspect`'s figures and recommendations, on the h5py-written test files.
#include "sources/hdf5/tools/inspect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sources/hdf5/fixture.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

const Hdf5DatasetInspection& Find(const Hdf5Inspection& in, const std::string& name) {
  for (const auto& d : in.datasets) {
    if (d.dataset == name) return d;
  }
  throw std::runtime_error("no dataset " + name);
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(Hdf5InspectTest, GzipChunksOf256SamplesDecodeTwoMegabytesPerSample) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const auto in = InspectHdf5(files->File("gzip"), nullptr, 16 * kGiB);
  const auto& mel = Find(in, "/mel");
  EXPECT_EQ(mel.dtype, "float32");
  EXPECT_EQ(mel.shape, (std::vector<int64_t>{1000, 1, 64, 32}));
  EXPECT_EQ(mel.layout, "chunked");
  EXPECT_EQ(mel.chunk_shape, (std::vector<int64_t>{256, 1, 64, 32}));
  EXPECT_EQ(mel.filters, "gzip level 1");
  EXPECT_EQ(mel.chunks_stored, 4);
  EXPECT_EQ(mel.sample_bytes, 8192u);
  EXPECT_EQ(mel.logical_bytes, 1000u * 8192);
  EXPECT_EQ(mel.decoded_bytes_per_sample, 256u * 8192);
  EXPECT_EQ(mel.read_bytes_per_sample, mel.storage_bytes / 4);
  EXPECT_NEAR(mel.compression_ratio,
              static_cast<double>(mel.logical_bytes) / static_cast<double>(mel.storage_bytes),
              1e-9);
  EXPECT_THAT(mel.recommendation,
              AllOf(HasSubstr("chunks of 256 samples, gzip level 1: a random sample decodes "
                              "2.1 MB (256x its 8.2 KB)"),
                    HasSubstr("fits in RAM"), HasSubstr("cache it")));
  // The labels decode 2 KB per sample: not worth a change.
  EXPECT_THAT(Find(in, "/label").recommendation, HasSubstr("cheap enough"));
  EXPECT_THAT(in.recommendation, HasSubstr("fits in RAM"));
}

TEST(Hdf5InspectTest, RecommendationFollowsFreeRam) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const auto in = InspectHdf5(files->File("gzip"), nullptr, 4 << 20);  // 4 MiB free
  EXPECT_THAT(Find(in, "/mel").recommendation,
              AllOf(HasSubstr("does not fit in RAM"), HasSubstr("block shuffle")));
  EXPECT_THAT(in.recommendation, HasSubstr("does not fit"));
}

TEST(Hdf5InspectTest, ContiguousAndMultiAxisChunks) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const auto plain = InspectHdf5(files->File("plain"), nullptr, 16 * kGiB);
  const auto& mel = Find(plain, "/mel");
  EXPECT_EQ(mel.layout, "contiguous");
  EXPECT_EQ(mel.read_bytes_per_sample, 8192u);
  EXPECT_EQ(mel.decoded_bytes_per_sample, 0u);
  EXPECT_THAT(plain.recommendation, HasSubstr("cheap"));

  const auto multi = InspectHdf5(files->File("multi_axis"), nullptr, 16 * kGiB);
  const auto& x = Find(multi, "/x");  // (101, 5, 13) int16 in chunks (7, 2, 5)
  EXPECT_EQ(x.chunks_per_sample, 9);
  // Per chunk: from the first to the last run of the sample's piece (rows of 5 elements,
  // 5 apart; the last chunk column holds 3 of them).
  EXPECT_GT(x.read_bytes_per_sample, x.sample_bytes);
  EXPECT_THAT(x.recommendation, HasSubstr("spans 9 chunks"));
  EXPECT_THAT(x.recommendation, HasSubstr("chunks=(7, 5, 13)"));
}

TEST(Hdf5InspectTest, UnreadableDatasetsAreReportedNotThrown) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const auto in = InspectHdf5(files->File("scaleoffset"), nullptr, 16 * kGiB);
  EXPECT_THAT(Find(in, "/s").read_path, HasSubstr("libhdf5 under its global lock"));
  EXPECT_THAT(Find(in, "/s").recommendation, HasSubstr("gpufeed rechunk"));
  const auto json = Hdf5InspectionToJson(in);
  EXPECT_EQ(json["datasets"].size(), 2u);
  EXPECT_TRUE(json["datasets"][0].contains("compression_ratio"));
  EXPECT_THAT(FormatHdf5Inspection(in), HasSubstr("/t: float32 [200]"));
}

TEST(Hdf5InspectTest, EveryLatestChunkIndexIsReadByGpufeedItself) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const auto in = InspectHdf5(files->File("latest_index"), nullptr, 16 * kGiB);
  const std::pair<const char*, const char*> kinds[] = {
      {"/fa_paged", "fixed array"},
      {"/fa_small", "fixed array"},
      {"/ea_axis0", "extensible array"},
      {"/ea_axis1", "extensible array"},
      {"/bt2", "v2 B-tree"},
      {"/bt2_plain", "v2 B-tree"},
      {"/single_gzip", "single chunk"},
      {"/single_plain", "single chunk"},
      {"/implicit", "implicit"},
  };
  for (const auto& [name, kind] : kinds) {
    EXPECT_EQ(Find(in, name).index_method, std::string(kind) + ", read directly") << name;
  }
  // (301, 40) in chunks of (1, 3): 301 x 14 positions, rows 100 to 249 never written.
  EXPECT_EQ(Find(in, "/fa_paged").chunks_stored, 151 * 14);
  EXPECT_EQ(Find(in, "/ea_axis0").chunks_stored, 301 * 8);
  EXPECT_EQ(Find(in, "/bt2").chunks_stored, 76 * 9);
  EXPECT_EQ(Find(in, "/implicit").chunks_stored, 43 * 3);
}

TEST(Hdf5InspectTest, AFileOfOnlyUnreadableDatasetsIsNotCalledCheap) {
  if (!testing::HaveH5py()) GTEST_SKIP() << "needs /usr/bin/python3 with h5py";
  testing::ScratchDir dir;
  const std::string path = dir.Path("strings.h5");
  ASSERT_TRUE(testing::RunPython(
      dir.path(), "make.py",
      "import sys, h5py, numpy as np\n"
      "with h5py.File(sys.argv[1], 'w') as f:\n"
      "    f.create_dataset('names', data=np.array([b'a', b'bb', b'ccc'], 'S3'))\n",  // fixed size
      path));
  const auto in = InspectHdf5(path, nullptr, 16 * kGiB);
  ASSERT_EQ(in.datasets.size(), 1u);
  EXPECT_FALSE(in.datasets[0].unsupported.empty());
  EXPECT_THAT(in.recommendation, HasSubstr("can read none of its datasets"));
}

TEST(Hdf5InspectTest, NotAnHdf5FileIsAnError) {
  testing::ScratchDir dir;
  const std::string path = dir.Write("x.h5", "definitely not hdf5");
  std::string msg;
  EXPECT_EQ(testing::ErrorCodeOf([&] { InspectHdf5(path); }, &msg), ErrorCode::kCorruptData);
  EXPECT_THAT(msg, HasSubstr(path));
}

}  // namespace
}  // namespace gpufeed
