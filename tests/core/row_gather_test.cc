// CopyRows and GatherRows: every row lands where asked, whatever the row size (below and
// above the prefetch threshold, across page boundaries), the count (fewer rows than the
// prefetch distance, none), and the order (repeats, descending).
#include "core/row_gather.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gpufeed {
namespace {

std::vector<std::byte> Numbered(size_t rows, size_t row_bytes) {
  std::vector<std::byte> v(rows * row_bytes);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 131 + i / 7) & 0xFF);
  return v;
}

class GatherRowsTest : public ::testing::TestWithParam<size_t> {};

TEST_P(GatherRowsTest, EveryRowIsTheAskedSourceRow) {
  const size_t rb = GetParam();
  const size_t n_src = 97;
  // One byte in front, so rows start off any alignment and cross 4 KiB pages unevenly.
  std::vector<std::byte> storage = Numbered(n_src * rb + 1, 1);
  const std::byte* src = storage.data() + 1;
  for (const size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{17}, size_t{40}}) {
    std::vector<int64_t> rows;
    for (size_t i = 0; i < n; ++i) rows.push_back(static_cast<int64_t>((i * 37 + 5) % n_src));
    if (n > 2) rows[2] = rows[1];  // a repeat
    std::vector<std::byte> dst(n * rb + 1, std::byte{0x5A});
    GatherRows(src, rb, rows, dst.data());
    for (size_t i = 0; i < n; ++i) {
      for (size_t b = 0; b < rb; ++b) {
        ASSERT_EQ(dst[i * rb + b], src[static_cast<size_t>(rows[i]) * rb + b])
            << "row " << i << " byte " << b << " of " << rb;
      }
    }
    EXPECT_EQ(dst[n * rb], std::byte{0x5A}) << "wrote past the last row";
  }
}

INSTANTIATE_TEST_SUITE_P(RowSizes, GatherRowsTest,
                         ::testing::Values(1, 4, 63, 64, 100, 4096, 8192, 8193, 70000));

TEST(CopyRowsTest, ScattersToTheGivenDestinationsAndCallsOnlyForRowsThatExist) {
  const size_t rb = 8192;
  const std::vector<std::byte> src = Numbered(20, rb);
  std::vector<std::byte> dst(20 * rb);
  const std::vector<size_t> order = {19, 3, 3, 0, 11};  // descending, repeated
  size_t highest_src = 0;
  size_t highest_dst = 0;
  CopyRows(
      order.size(), rb,
      [&](size_t i) {
        highest_src = std::max(highest_src, i);
        return src.data() + order[i] * rb;
      },
      [&](size_t i) {
        highest_dst = std::max(highest_dst, i);
        return dst.data() + i * rb;
      });
  EXPECT_LT(highest_src, order.size());  // the prefetch looks ahead only within the rows
  EXPECT_LT(highest_dst, order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(dst.data() + i * rb, src.data() + order[i] * rb, rb)) << i;
  }
}

TEST(CopyRowsTest, PrefetchDistanceCoversAbout64KiBWithinBounds) {
  EXPECT_EQ(PrefetchDistance(8192), 8u);
  EXPECT_EQ(PrefetchDistance(64), 16u);
  EXPECT_EQ(PrefetchDistance(size_t{1} << 20), 4u);
  EXPECT_EQ(PrefetchDistance(0), 16u);
}

}  // namespace
}  // namespace gpufeed
