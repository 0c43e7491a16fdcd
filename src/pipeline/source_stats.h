// SourceStatsOf: what a source reports of itself (Source::Stats), with the chunk counters of
// an HDF5 source, which gives them through Hdf5SourceCounters (gpufeed/hdf5.h) rather than
// through Source::Stats. What the loader puts in LoaderStats::source, and what a source in
// front of another (a cache that fills while it is read) takes of the other's.
// Thread-safety: thread-safe; may be called while workers read the source.
#pragma once

#include "gpufeed/source.h"

namespace gpufeed {

SourceStats SourceStatsOf(const Source& source);

}  // namespace gpufeed
