// The decoded-chunk cache and the filter decoder, without files.
#include "sources/hdf5/read/chunk_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "gpufeed/error.h"
#include "sources/hdf5/filters/filters.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

DecodedChunkCache::Buffer Chunk(size_t n, int fill) {
  return std::make_shared<const ChunkBytes>(n, std::byte(fill));
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

// The workers of a source share one cache: what one decoded, another finds; together they
// keep at most the budget.
TEST(DecodedChunkCacheTest, WorkersShareOneCache) {
  auto shared = std::make_shared<SharedChunkCache>(400);
  DecodedChunkCache first(shared);
  DecodedChunkCache second(shared);
  EXPECT_EQ(first.capacity(), 400U);
  first.BeginBatch();
  first.Insert(1, Chunk(100, 1));
  first.EndBatch();
  second.BeginBatch();
  ASSERT_NE(second.Find(1), nullptr);
  EXPECT_EQ((*second.Find(1))[0], std::byte{1});
  for (uint64_t k = 2; k <= 6; ++k) second.Insert(k, Chunk(100, static_cast<int>(k)));
  second.EndBatch();
  // Every chunk was used by the one batch in flight when 5 and 6 came: they were not kept.
  EXPECT_EQ(shared->size(), 4U);
  EXPECT_EQ(shared->bytes(), 400U);
  EXPECT_EQ(first.Find(5), nullptr);
  // No batch in flight: the least recently used go first.
  first.BeginBatch();
  first.Insert(7, Chunk(100, 7));
  EXPECT_NE(second.Find(7), nullptr);
  EXPECT_LE(shared->bytes(), 400U);
  // A key another worker kept meanwhile stays as it was.
  second.BeginBatch();
  second.Insert(7, Chunk(100, 70));
  EXPECT_EQ((*first.Find(7))[0], std::byte{7});
}

// A chunk one worker fetches is not fetched again by another meanwhile: the second lookup
// gets the first's fetch to wait for, and the chunk it hands over.
TEST(DecodedChunkCacheTest, ALookupWaitsForAFetchInFlight) {
  auto shared = std::make_shared<SharedChunkCache>(400);
  DecodedChunkCache first(shared);
  DecodedChunkCache second(shared);
  ChunkLookup claimed = first.Lookup(1, /*claim=*/true);
  ASSERT_TRUE(claimed.fetch);
  EXPECT_EQ(claimed.held, nullptr);
  EXPECT_FALSE(claimed.pending.valid());
  ChunkLookup waiting = second.Lookup(1, /*claim=*/true);
  EXPECT_FALSE(waiting.fetch);
  ASSERT_TRUE(waiting.pending.valid());
  EXPECT_EQ(shared->fetch_waits(), 1);
  // Without a claim, a chunk neither held nor fetched is nothing.
  ChunkLookup none = second.Lookup(2, /*claim=*/false);
  EXPECT_FALSE(none.fetch || none.held || none.pending.valid());
  std::shared_ptr<const ChunkBytes> chunk = Chunk(100, 5);
  claimed.fetch.Finish(chunk);
  EXPECT_FALSE(claimed.fetch);
  EXPECT_EQ(waiting.pending.get(), chunk);
  // Then it is held.
  ChunkLookup later = second.Lookup(1, /*claim=*/true);
  EXPECT_EQ(later.held, chunk);
  EXPECT_FALSE(later.fetch);
}

// A fetch dropped unfinished (its read failed) hands its waiters null, and the next lookup
// may claim the chunk again.
TEST(DecodedChunkCacheTest, AnAbandonedFetchHandsItsWaitersNothing) {
  auto shared = std::make_shared<SharedChunkCache>(400);
  DecodedChunkCache first(shared);
  DecodedChunkCache second(shared);
  std::shared_future<std::shared_ptr<const ChunkBytes>> pending;
  {
    ChunkLookup claimed = first.Lookup(3, /*claim=*/true);
    ASSERT_TRUE(claimed.fetch);
    pending = second.Lookup(3, /*claim=*/true).pending;
    ASSERT_TRUE(pending.valid());
  }  // dropped unfinished
  EXPECT_EQ(pending.get(), nullptr);
  EXPECT_EQ(shared->size(), 0U);
  ChunkLookup again = second.Lookup(3, /*claim=*/true);
  EXPECT_TRUE(again.fetch);
  // A claim moved into another is abandoned once, by its last owner.
  ChunkFetch moved = std::move(again.fetch);
  EXPECT_FALSE(again.fetch);
  auto waiter = first.Lookup(3, /*claim=*/true).pending;
  moved.Abandon();
  EXPECT_EQ(waiter.get(), nullptr);
}

// A chunk a batch in flight on another worker used is not evicted for a new one.
TEST(DecodedChunkCacheTest, ChunksOfAnotherWorkersBatchInFlightAreKept) {
  auto shared = std::make_shared<SharedChunkCache>(200);
  DecodedChunkCache a(shared);
  DecodedChunkCache b(shared);
  a.BeginBatch();
  a.Insert(1, Chunk(100, 1));
  b.BeginBatch();
  b.Insert(2, Chunk(100, 2));
  b.EndBatch();
  b.BeginBatch();
  b.Insert(3, Chunk(100, 3));  // 1 is a's (in flight), 2 b's own older batch: 2 goes
  EXPECT_NE(b.Find(1), nullptr);
  EXPECT_EQ(b.Find(2), nullptr);
  EXPECT_NE(b.Find(3), nullptr);
  a.EndBatch();
  b.EndBatch();
  b.BeginBatch();
  b.Insert(4, Chunk(100, 4));  // a's batch ended: its chunk is the least recently used
  EXPECT_EQ(b.Find(1), nullptr);
}

// Workers deciding, inserting and reading at once (ThreadSanitizer's case): every chunk
// found holds its own key's bytes, a recycled buffer is never written while read.
TEST(DecodedChunkCacheTest, ConcurrentWorkersReadWhatWasInserted) {
  auto shared = std::make_shared<SharedChunkCache>(16 * 4096);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      DecodedChunkCache view(shared);
      for (int batch = 0; batch < 300; ++batch) {
        view.BeginBatch();
        for (int j = 0; j < 8; ++j) {
          const uint64_t key = static_cast<uint64_t>((batch * 7 + j * 3 + t) % 40);
          DecodedChunkCache::Buffer hold = view.Find(key);
          if (!hold) {
            auto buffer = view.NewBuffer(4096);
            std::memset(buffer->data(), static_cast<int>(key), buffer->size());
            view.Insert(key, buffer);
            hold = std::move(buffer);
          }
          for (std::byte b : *hold) {
            if (b != std::byte(key)) ++wrong;
          }
        }
        view.EndBatch();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(shared->bytes(), 16U * 4096);
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
  const auto recycled = cache.NewBuffer(100);
  EXPECT_EQ(recycled.get(), second);
  // 1 comes back once its last holder lets go.
  const void* first = held.get();
  held.reset();
  EXPECT_EQ(cache.NewBuffer(100).get(), first);
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
