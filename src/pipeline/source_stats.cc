#include "pipeline/source_stats.h"

#include "gpufeed/hdf5.h"

namespace gpufeed {

SourceStats SourceStatsOf(const Source& source) {
  SourceStats stats = source.Stats();
  if (IsHdf5Source(source)) {
    const Hdf5Counters counters = Hdf5SourceCounters(source);
    stats.chunks_decoded = counters.chunks_decoded;
    stats.chunk_cache_hits = counters.chunk_cache_hits;
    stats.chunk_cache_bytes = static_cast<int64_t>(counters.chunk_cache_bytes);
  }
  return stats;
}

}  // namespace gpufeed
