// GatherCachedRows: how the RAM and shared-memory tiers serve a batch from their copy of the
// whole data set (one array of rows per field, in process memory or a read-only mapping of
// the cache file). Both tiers run this one loop, so a cache file mapped from /dev/shm is
// gathered exactly as fast, and into exactly the same bytes, as the RAM tier's arrays.
//
// The rows are taken in sample order (SortForLocality): neighbouring samples share pages and
// TLB entries. Each field's copy is core's CopyRows, which prefetches the pages of rows a few
// ahead. No allocation and nothing to destroy, so it may run inside GuardMappedRead.
// Thread-safety: pure functions over the caller's memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/row_gather.h"
#include "gpufeed/source.h"

namespace gpufeed {

// (sample index, row of the batch it goes to).
using CachedRow = std::pair<int64_t, size_t>;

// `order` becomes the batch's (sample, row) pairs in sample order.
inline void SortForLocality(std::span<const int64_t> indices, std::vector<CachedRow>& order) {
  order.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) order[i] = {indices[i], i};
  std::sort(order.begin(), order.end());
}

// For each field f: out row order[k].second = arrays[f] row order[k].first, rows of
// row_bytes[f] bytes.
// REQUIRES: every sample indexes a row of every array; out has a row for every batch row.
inline void GatherCachedRows(std::span<const std::byte* const> arrays,
                             std::span<const size_t> row_bytes, std::span<const CachedRow> order,
                             const BatchView& out) {
  for (size_t f = 0; f < arrays.size(); ++f) {
    const size_t row = row_bytes[f];
    const std::byte* src = arrays[f];
    std::byte* dst = out.fields[f];
    CopyRows(
        order.size(), row,
        [&](size_t k) { return src + static_cast<size_t>(order[k].first) * row; },
        [&](size_t k) { return dst + order[k].second * row; });
  }
}

}  // namespace gpufeed
