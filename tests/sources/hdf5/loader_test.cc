// The HDF5 source under the real Loader: every sample exactly once per epoch, equal to what
// h5py reads, with a full shuffle and with block shuffle by the source's chunk length.
#include <gtest/gtest.h>

#include <cstring>

#include "gpufeed/hdf5.h"
#include "gpufeed/loader.h"
#include "sources/hdf5/fixture.h"

namespace gpufeed {
namespace {

void CheckEpochs(const testing::Hdf5Files& files, int64_t shuffle_block) {
  // gzip.h5: label[i] == i, mel chunked by 256 samples, gzip level 1.
  auto source = OpenHdf5({files.File("gzip")}, {"mel", "label"});
  const std::string mel = files.Expected("gzip", "mel");
  LoaderOptions options;
  options.batch_size = 96;
  options.seed = 5;
  options.shuffle_block = shuffle_block;
  options.workers = 2;
  Loader loader(source, options);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen(1000, 0);
    int64_t batches = 0;
    while (auto batch = loader.Next()) {
      ++batches;
      const FieldView labels = batch->field("label");
      const FieldView mels = batch->field("mel");
      for (int64_t r = 0; r < labels.rows; ++r) {
        const int64_t label = labels.as<int64_t>()[r];
        ASSERT_EQ(label, batch->indices()[r]);
        ++seen[label];
        ASSERT_EQ(std::memcmp(static_cast<const char*>(mels.data) + r * 8192,
                              mel.data() + label * 8192, 8192),
                  0)
            << "sample " << label;
      }
    }
    EXPECT_EQ(batches, 11);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i << " epoch " << epoch;
  }
}

TEST(Hdf5LoaderTest, FullShuffleReadsEverySampleOncePerEpoch) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  CheckEpochs(*files, 0);
}

TEST(Hdf5LoaderTest, BlockShuffleByChunkReadsEverySampleOncePerEpoch) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  CheckEpochs(*files, -1);  // the source's PreferredBlock(): 256
}

}  // namespace
}  // namespace gpufeed
