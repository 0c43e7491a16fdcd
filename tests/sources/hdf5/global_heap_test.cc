// The global heap collection parser (variable-length data's items): collections as libhdf5
// writes them, and each way a crafted one is refused, never read past its bytes nor walked
// forever.
#include "sources/hdf5/format/global_heap.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "error_code_of.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

void PutLe(std::vector<uint8_t>& b, uint64_t v, size_t width) {
  for (size_t i = 0; i < width; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

struct Object {
  uint16_t index;
  std::vector<uint8_t> data;
};

// A collection of `objects`, then free space (object 0) up to `size` bytes (at least the
// header and the objects), with 8-byte lengths.
std::vector<uint8_t> Collection(const std::vector<Object>& objects, uint64_t size = 4096) {
  std::vector<uint8_t> b = {'G', 'C', 'O', 'L', 1, 0, 0, 0};
  PutLe(b, size, 8);
  for (const Object& o : objects) {
    PutLe(b, o.index, 2);
    PutLe(b, 1, 2);  // reference count
    PutLe(b, 0, 4);
    PutLe(b, o.data.size(), 8);
    b.insert(b.end(), o.data.begin(), o.data.end());
    b.resize((b.size() + 7) / 8 * 8, 0);
  }
  if (b.size() + 16 <= size) {
    const uint64_t free = size - b.size();
    PutLe(b, 0, 2);
    PutLe(b, 0, 2);
    PutLe(b, 0, 4);
    PutLe(b, free, 8);
  }
  b.resize(size, 0);
  return b;
}

const std::string kWhere = "x.h5: dataset /tokens, sample 3: the collection at 2112";

TEST(GlobalHeap, ObjectsAsLibhdf5WritesThem) {
  const auto heap = ParseHdf5GlobalHeap(
      Collection({{1, {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}}, {2, {}}, {4, {'h', 'i'}}}), 8, kWhere);
  ASSERT_EQ(heap.objects.size(), 3u);
  const auto one = heap.Find(1);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->size, 12u);
  EXPECT_EQ(heap.bytes[one->offset + 8], 3);
  EXPECT_EQ(heap.Find(2)->size, 0u);
  const auto four = heap.Find(4);
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(heap.bytes[four->offset], 'h');
  EXPECT_FALSE(heap.Find(3).has_value());
  EXPECT_FALSE(heap.Find(0).has_value());  // free space is no object
}

TEST(GlobalHeap, SizeComesFromTheHeader) {
  const auto b = Collection({{1, {7}}}, 4096);
  EXPECT_EQ(ParseHdf5GlobalHeapSize({b.data(), Hdf5GlobalHeapHeaderBytes(8)}, 8, kWhere), 4096u);
}

void ExpectRefused(const std::vector<uint8_t>& bytes, const char* says) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ParseHdf5GlobalHeap(bytes, 8, kWhere); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr(kWhere), HasSubstr(says)));
}

TEST(GlobalHeap, DamagedHeadersAreRefused) {
  auto b = Collection({{1, {7}}});
  b[0] = 'X';
  ExpectRefused(b, "signature");
  b = Collection({{1, {7}}});
  b[4] = 2;
  ExpectRefused(b, "version 2");
  b = Collection({{1, {7}}});
  b[8] = 12;  // the collection's size: 12 bytes, less than its 16-byte header
  b[9] = 0;
  ExpectRefused(b, "smaller than its header");
  ExpectRefused(std::vector<uint8_t>{'G', 'C', 'O', 'L', 1}, "ends early");
}

TEST(GlobalHeap, SizeDisagreeingWithTheBytesIsRefused) {
  auto b = Collection({{1, {7}}});
  b.resize(2048);
  ExpectRefused(b, "says it holds 4096 bytes, 2048 were read");
}

TEST(GlobalHeap, ObjectsRunningPastTheCollectionAreRefused) {
  auto b = Collection({{1, {7}}});
  b[16 + 8] = 0xff;  // object 1's size: 0x...ff bytes
  b[16 + 8 + 7] = 0x7f;
  ExpectRefused(b, "does not fit");
  b = Collection({{1, {7}}});
  for (int i = 0; i < 8; ++i) b[16 + 8 + i] = 0xff;  // 2^64 - 1: padding it would wrap
  ExpectRefused(b, "does not fit");
}

TEST(GlobalHeap, FreeSpaceOfNoBytesIsRefusedNotWalkedForever) {
  auto b = Collection({{1, {7}}});
  // Object 0 after object 1 (16 + 16 + 8 bytes in): its size 0 would never move the walk.
  for (int i = 0; i < 8; ++i) b[40 + 8 + i] = 0;
  ExpectRefused(b, "does not fit");
}

TEST(GlobalHeap, AnIndexListedTwiceIsRefused) {
  ExpectRefused(Collection({{3, {1}}, {3, {2}}}), "listed twice");
}

TEST(GlobalHeap, FourByteLengths) {
  std::vector<uint8_t> b = {'G', 'C', 'O', 'L', 1, 0, 0, 0};
  PutLe(b, 40, 4);
  PutLe(b, 5, 2);
  PutLe(b, 1, 2);
  PutLe(b, 0, 4);
  PutLe(b, 3, 4);
  b.insert(b.end(), {9, 8, 7, 0});
  b.resize(40, 0);  // 8 bytes left, too few for an object: free space
  const auto heap = ParseHdf5GlobalHeap(b, 4, kWhere);
  ASSERT_TRUE(heap.Find(5).has_value());
  EXPECT_EQ(heap.bytes[heap.Find(5)->offset + 2], 7);
}

}  // namespace
}  // namespace gpufeed
