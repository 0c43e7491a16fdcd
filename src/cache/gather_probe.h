// GatherProbe: what `cache="auto"` decides from. Measures, in this process and now, how fast
// shuffled rows are gathered from the source itself and from the two copies a cache would
// make: anonymous memory on 2 MB pages (the RAM tier) and a read-only shared mapping of a
// tmpfs file (the shm tier), both with the tiers' own gather (GatherCachedRows), each over
// the same random rows.
//
// Each gather runs twice and the better pass counts (the second finds the rows in the page
// cache and the pages mapped, as every epoch after the first does). The probe reads at most
// kProbeRows rows from the source and builds two copies of at most 16 MB (already far past
// the TLB's reach on 4 KB pages), so it costs tens of milliseconds; the figure is a rate over
// a probe-sized array, not a promise about the whole set.
// The source is read in pieces of 512 rows; the calling thread's CancelToken is checked
// between them (Error(kCancelled)).
// Thread-safety: one call at a time per source is enough; the function keeps no state.
#pragma once

#include <cstdint>
#include <string>

#include "gpufeed/source.h"

namespace gpufeed {

struct GatherRates {
  double source_bytes_per_s = 0;
  double ram_bytes_per_s = 0;
  double shm_bytes_per_s = 0;    // 0 when a memfd could not be made (the shm tier is refused)
  std::string ToString() const;  // "source 1.2 GB/s, RAM copy 9.8 GB/s, shm copy 2.1 GB/s"
};

inline constexpr int64_t kProbeRows = 4096;

// Throws what the source's Read throws (the source cannot be read: no tier helps), and
// Error(kCancelled) when the calling thread's CancelToken is cancelled.
GatherRates ProbeGatherRates(const Source& source);

}  // namespace gpufeed
