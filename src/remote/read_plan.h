// How ReadMany's ranges become requests: adjacent and overlapping ranges share one GET.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpufeed/file.h"

namespace gpufeed::remote {

struct CoalescedRead {
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<size_t> members;  // indices into the ranges, by offset
};

// The ranges (empty ones left out) grouped into the fewest reads that cover each range
// exactly, merging a range into the read before it when it starts at or before that read's
// end. REQUIRES: no range's offset + n overflows (the caller checks against the size).
std::vector<CoalescedRead> CoalesceRanges(std::span<const ReadRange> ranges);

}  // namespace gpufeed::remote
