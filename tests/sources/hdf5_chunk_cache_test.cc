// The decoded-chunk cache and the filter decoder, without files.
#include "sources/hdf5_chunk_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "gpufeed/error.h"
#include "sources/hdf5_filters.h"
#include "sources/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

DecodedChunkCache::Buffer Chunk(size_t n, int fill) {
  return std::make_shared<const std::vector<std::byte>>(n, std::byte(fill));
}

TEST(DecodedChunkCacheTest, EvictsLeastRecentlyUsedWithinBudget) {
  DecodedChunkCache cache(300);
  cache.Insert(1, Chunk(100, 1));
  cache.Insert(2, Chunk(100, 2));
  cache.Insert(3, Chunk(100, 3));
  cache.BeginBatch();
  ASSERT_NE(cache.Find(1), nullptr);  // 1 is now the most recent
  cache.Insert(4, Chunk(100, 4));     // evicts 2
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_NE(cache.Find(1), nullptr);
  EXPECT_NE(cache.Find(3), nullptr);
  EXPECT_EQ(cache.bytes(), 300u);
  cache.Insert(5, Chunk(301, 5));  // larger than the budget: not kept, nothing evicted
  EXPECT_EQ(cache.Find(5), nullptr);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Fits(301));
}

// The workers of a source share one budget: each of n caches alive keeps at most 1/n.
TEST(DecodedChunkCacheTest, WorkersShareOneBudget) {
  auto budget = std::make_shared<ChunkCacheBudget>(400);
  auto first = std::make_unique<DecodedChunkCache>(budget);
  EXPECT_EQ(first->capacity(), 400U);
  {
    DecodedChunkCache second(budget);
    DecodedChunkCache third(budget);
    EXPECT_EQ(first->capacity(), 133U);
    for (uint64_t k = 1; k <= 4; ++k) {
      second.BeginBatch();
      second.Insert(k, Chunk(60, static_cast<int>(k)));
    }
    EXPECT_EQ(second.size(), 2U);  // 2 x 60 bytes within its 133
    EXPECT_LE(second.bytes(), 133U);
    EXPECT_FALSE(third.Fits(200));
  }
  EXPECT_EQ(first->capacity(), 400U);  // the others are gone: the whole budget again
  EXPECT_EQ(budget->total(), 400U);
}

TEST(DecodedChunkCacheTest, KeepsThisBatchsChunksOverNewOnes) {
  DecodedChunkCache cache(200);
  cache.BeginBatch();
  cache.Insert(1, Chunk(100, 1));
  cache.Insert(2, Chunk(100, 2));
  cache.Insert(3, Chunk(100, 3));  // 1 and 2 were used by this batch: 3 is not kept
  EXPECT_EQ(cache.Find(3), nullptr);
  cache.BeginBatch();  // the next batch of a cyclic scan finds 1 and 2
  EXPECT_NE(cache.Find(1), nullptr);
  EXPECT_NE(cache.Find(2), nullptr);
  cache.BeginBatch();
  EXPECT_NE(cache.Find(2), nullptr);
  cache.Insert(3, Chunk(100, 3));  // 1 is from an older batch: evicted
  EXPECT_EQ(cache.Find(1), nullptr);
  EXPECT_NE(cache.Find(3), nullptr);
}

TEST(DecodedChunkCacheTest, RecyclesOnlyBuffersNobodyHolds) {
  DecodedChunkCache cache(100);
  auto held = cache.NewBuffer(100);
  cache.Insert(1, held);  // still held by the caller when evicted
  cache.BeginBatch();
  cache.Insert(2, cache.NewBuffer(100));
  auto next = cache.NewBuffer(100);
  EXPECT_NE(next.get(), held.get());
  const void* second = cache.Find(2).get();
  cache.BeginBatch();
  cache.Insert(3, next);  // evicts 2, which nobody holds: recycled
  EXPECT_EQ(cache.NewBuffer(100).get(), second);
}

std::vector<std::byte> Deflate(const std::vector<std::byte>& in) {
  uLongf n = compressBound(in.size());
  std::vector<std::byte> out(n);
  compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(in.data()),
            in.size(), 1);
  out.resize(n);
  return out;
}

std::vector<std::byte> Shuffle(const std::vector<std::byte>& in, size_t es) {
  std::vector<std::byte> out(in.size());
  const size_t n = in.size() / es;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < es; ++j) out[j * n + i] = in[i * es + j];
  }
  return out;
}

TEST(Hdf5FiltersTest, ShuffleThenDeflateRoundTrips) {
  std::vector<std::byte> data(4000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte((i * 7) % 251);
  const std::vector<Hdf5Filter> filters{{kHdf5FilterShuffle, "shuffle", {4}},
                                        {kHdf5FilterDeflate, "deflate", {1}}};
  const auto raw = Deflate(Shuffle(data, 4));
  std::vector<std::byte> out(data.size()), scratch;
  DecodeHdf5Chunk(raw, filters, 0, 4, out, scratch);
  EXPECT_EQ(out, data);
  // Bit 1 of the mask: deflate skipped for this chunk (stored shuffled only).
  const auto shuffled = Shuffle(data, 4);
  DecodeHdf5Chunk(shuffled, filters, 0b10, 4, out, scratch);
  EXPECT_EQ(out, data);
}

TEST(Hdf5FiltersTest, GarbageAndShortStreamsAreCorruptData) {
  const std::vector<Hdf5Filter> filters{{kHdf5FilterDeflate, "deflate", {1}}};
  std::vector<std::byte> data(1000, std::byte{3}), out(1000), scratch;
  auto raw = Deflate(data);
  std::string msg;
  auto truncated = std::vector<std::byte>(raw.begin(), raw.begin() + raw.size() / 2);
  EXPECT_EQ(
      testing::ErrorCodeOf([&] { DecodeHdf5Chunk(truncated, filters, 0, 1, out, scratch); }, &msg),
      ErrorCode::kCorruptData);
  std::vector<std::byte> garbage(50, std::byte{0x5a});
  EXPECT_EQ(
      testing::ErrorCodeOf([&] { DecodeHdf5Chunk(garbage, filters, 0, 1, out, scratch); }, &msg),
      ErrorCode::kCorruptData);
  EXPECT_THAT(msg, HasSubstr("corrupt deflate stream"));
  std::vector<std::byte> small(999);  // the stream holds more than the chunk
  EXPECT_EQ(
      testing::ErrorCodeOf([&] { DecodeHdf5Chunk(raw, filters, 0, 1, small, scratch); }, &msg),
      ErrorCode::kCorruptData);
}

TEST(Hdf5FiltersTest, Fletcher32MatchesHdf5) {
  // H5_checksum_fletcher32 of "abcde" (odd length) and of 8 zero bytes.
  const char* s = "abcde";
  std::vector<std::byte> abc(5);
  std::memcpy(abc.data(), s, 5);
  const uint32_t sum1 = ((0x6162 + 0x6364 + 0x6500) % 0xffff);
  const uint32_t sum2 = (0x6162 + (0x6162 + 0x6364) + (0x6162 + 0x6364 + 0x6500)) % 0xffff;
  EXPECT_EQ(Hdf5Fletcher32(abc), (sum2 << 16) | sum1);
  EXPECT_EQ(Hdf5Fletcher32(std::vector<std::byte>(8)), 0u);
}

}  // namespace
}  // namespace gpufeed
