// The arrangement of packed rows: which pieces of which samples each row holds.
// - Stream (split): the samples in one order, end to end, cut every `length` items; an
//   epoch's order is the source's, or a permutation drawn from a seed.
// - Bins (!split): whole samples packed first-fit-decreasing within windows of samples.
// Thread-safety: values, read-only once built.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gpufeed {

// A piece of a sample in a row: `items` items of sample `sample` from item `first`, then the
// separator when `eos`.
struct PackPiece {
  int64_t sample = 0;
  int64_t first = 0;
  int64_t items = 0;
  bool eos = false;
};

struct PackStream {
  std::vector<int64_t> order;   // the samples in stream order
  std::vector<int64_t> prefix;  // prefix[k]: the stream position where order[k] starts (n + 1)
};

// The stream of `lengths` (each sample's items; `eos` adds one each) in the source's order,
// or shuffled by `seed` (a Fisher-Yates permutation drawn with splitmix64).
PackStream MakeStream(std::span<const int64_t> lengths, bool eos, bool shuffle, uint64_t seed);

// The pieces of row `row` of `length` items over `stream` (the last may end short).
void StreamRow(const PackStream& stream, std::span<const int64_t> lengths, bool eos, int64_t length,
               int64_t row, std::vector<PackPiece>& pieces);

struct PackBins {
  std::vector<int64_t> row_begin;  // rows + 1 offsets into `pieces`
  std::vector<PackPiece> pieces;
  int64_t truncated_items = 0;  // items of samples longer than a row, cut
};

// Whole samples packed first-fit-decreasing into rows of `length` items, window by window of
// `window` samples in the source's order; a sample longer than a row keeps its first items.
PackBins MakeBins(std::span<const int64_t> lengths, bool eos, int64_t length, int64_t window);

}  // namespace gpufeed
