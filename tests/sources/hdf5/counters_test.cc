// Each chunk a batch needs is decoded once per batch, however many of the batch's samples
// it holds, and a worker's cache serves the next batch's repeats.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "gpufeed/hdf5.h"
#include "sources/hdf5/fixture.h"

namespace gpufeed {
namespace {

struct Batch {
  std::vector<int64_t> indices;
  std::vector<std::vector<std::byte>> rows;
  BatchView view;
  Batch(const Source& s, std::vector<int64_t> idx) : indices(std::move(idx)) {
    view.rows = static_cast<int64_t>(indices.size());
    for (const auto& f : s.schema().fields) {
      rows.emplace_back(indices.size() * f.SampleBytes());
      view.fields.push_back(rows.back().data());
    }
  }
};

TEST(Hdf5CountersTest, EachNeededChunkIsDecodedOncePerBatchUnderFullShuffle) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  // gzip.h5: 1000 samples in chunks of 256 (4 chunks) for mel and for label.
  auto source = OpenHdf5({files->File("gzip")}, {"mel", "label"},
                         {.file_system = nullptr, .chunk_cache_bytes = 0});
  std::vector<int64_t> order(1000);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(11));
  auto state = source->NewWorkerState();
  int64_t expected = 0;
  for (size_t begin = 0; begin < order.size(); begin += 150) {
    const size_t end = std::min(order.size(), begin + 150);
    Batch batch(*source, {order.begin() + begin, order.begin() + end});
    std::set<int64_t> chunks;
    for (int64_t i : batch.indices) chunks.insert(i / 256);
    const int64_t before = Hdf5SourceCounters(*source).chunks_decoded;
    source->Read(batch.indices, batch.view, state.get());
    const int64_t decoded = Hdf5SourceCounters(*source).chunks_decoded - before;
    // Two datasets, each chunked by 256 samples: each needed chunk once per dataset.
    EXPECT_EQ(decoded, 2 * static_cast<int64_t>(chunks.size())) << "batch at " << begin;
    expected += decoded;
  }
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, expected);
  EXPECT_EQ(Hdf5SourceCounters(*source).chunk_cache_hits, 0);
}

TEST(Hdf5CountersTest, MultiAxisChunksAreDecodedOncePerBatchToo) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  // multi_axis.h5 y: (101, 5, 13) in chunks (7, 2, 5): each sample spans 3 x 3 chunks.
  auto source = OpenHdf5({files->File("multi_axis")}, {"y"},
                         {.file_system = nullptr, .chunk_cache_bytes = 0});
  Batch batch(*source, {100, 0, 3, 6, 7, 50, 1, 99});  // chunk rows 14, 0, 0, 0, 1, 7, 0, 14
  source->Read(batch.indices, batch.view, source->NewWorkerState().get());
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 4 * 9);
}

TEST(Hdf5CountersTest, WorkerCacheServesRepeatedChunks) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto source = OpenHdf5({files->File("gzip")}, {"mel"});  // default cache: 256 MiB
  auto state = source->NewWorkerState();
  Batch first(*source, {0, 300, 600});
  source->Read(first.indices, first.view, state.get());
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 3);
  Batch second(*source, {1, 301, 900});
  source->Read(second.indices, second.view, state.get());
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 4);
  EXPECT_EQ(Hdf5SourceCounters(*source).chunk_cache_hits, 2);
  // Another worker finds what the first decoded: the workers share one cache.
  source->Read(second.indices, second.view, source->NewWorkerState().get());
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 4);
  EXPECT_EQ(Hdf5SourceCounters(*source).chunk_cache_hits, 5);
}

TEST(Hdf5CountersTest, CacheStaysWithinItsBudget) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  // A chunk of mel is 256 * 8 KiB = 2 MiB; a 5 MiB cache keeps two.
  auto source = OpenHdf5({files->File("gzip")}, {"mel"},
                         {.file_system = nullptr, .chunk_cache_bytes = 5 << 20});
  auto state = source->NewWorkerState();
  for (int64_t i : {0, 256, 512, 0}) {
    Batch b(*source, {i});
    source->Read(b.indices, b.view, state.get());
  }
  // 0, 256, 512 decoded; 0 was evicted by 512, so decoded again.
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 4);
  EXPECT_EQ(Hdf5SourceCounters(*source).chunk_cache_hits, 0);
}

TEST(Hdf5CountersTest, FullShuffleScansHitWhatTheCacheHolds) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  // Four 2 MiB chunks, a cache of two: batch after batch needs all four, in file order.
  auto source = OpenHdf5({files->File("gzip")}, {"mel"},
                         {.file_system = nullptr, .chunk_cache_bytes = 5 << 20});
  auto state = source->NewWorkerState();
  for (int i = 0; i < 3; ++i) {
    Batch b(*source, {900, 10, 300, 600});
    source->Read(b.indices, b.view, state.get());
  }
  // Batch 1 decodes 4 and keeps chunks 0 and 1; batches 2 and 3 hit those, decode 2 more.
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 8);
  EXPECT_EQ(Hdf5SourceCounters(*source).chunk_cache_hits, 4);
}

TEST(Hdf5CountersTest, UnfilteredDataIsNeverDecoded) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto source = OpenHdf5({files->File("multi_axis")}, {"x", "z"});
  Batch b(*source, {5, 17, 100});
  source->Read(b.indices, b.view, source->NewWorkerState().get());
  EXPECT_EQ(Hdf5SourceCounters(*source).chunks_decoded, 0);
  EXPECT_GT(Hdf5SourceCounters(*source).bytes_read, 0);
}

}  // namespace
}  // namespace gpufeed
