// Range coalescing for ReadMany.
#include "remote/read_plan.h"

#include <algorithm>
#include <numeric>

namespace gpufeed::remote {

std::vector<CoalescedRead> CoalesceRanges(std::span<const ReadRange> ranges, uint64_t max_gap,
                                          uint64_t max_length) {
  std::vector<size_t> order;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].n > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].offset < ranges[b].offset; });
  std::vector<CoalescedRead> out;
  for (size_t i : order) {
    const uint64_t begin = ranges[i].offset;
    const uint64_t end = begin + ranges[i].n;
    // begin - read end, without overflow: begin >= the read's offset (sorted).
    if (!out.empty() && begin - out.back().offset <= out.back().length + max_gap &&
        std::max(out.back().offset + out.back().length, end) - out.back().offset <=
            std::max(max_length, out.back().length)) {
      CoalescedRead& last = out.back();
      last.length = std::max(last.offset + last.length, end) - last.offset;
      last.members.push_back(i);
    } else {
      out.push_back({begin, end - begin, {i}});
    }
  }
  return out;
}

}  // namespace gpufeed::remote
