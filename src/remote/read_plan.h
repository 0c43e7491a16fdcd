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

// The ranges (empty ones left out) grouped into reads, merging a range into the read before
// it when it starts at most `max_gap` bytes after that read's end and the read stays within
// `max_length` bytes (a range longer than that is a read of its own). A gap's bytes are read
// and dropped: a request costs a round trip, during which the store sends far more than a
// small gap. REQUIRES: no range's offset + n overflows (the caller checks against the size).
std::vector<CoalescedRead> CoalesceRanges(std::span<const ReadRange> ranges, uint64_t max_gap = 0,
                                          uint64_t max_length = ~uint64_t{0});

}  // namespace gpufeed::remote
