#include <algorithm>

#include "gpufeed/varlen.h"
#include "sources/varlen/varlen_common.h"

namespace gpufeed {

LengthSummary SummarizeLengths(const Source& source, int field) {
  std::vector<int64_t> lengths = AllLengths(source, field);
  LengthSummary summary;
  summary.samples = static_cast<int64_t>(lengths.size());
  for (int64_t length : lengths) summary.total += length;
  if (lengths.empty()) return summary;
  std::sort(lengths.begin(), lengths.end());
  for (int percent : {0, 50, 90, 99, 100}) {
    const size_t at = (lengths.size() - 1) * static_cast<size_t>(percent) / 100;
    summary.percentiles.emplace_back(percent, lengths[at]);
  }
  return summary;
}

}  // namespace gpufeed
