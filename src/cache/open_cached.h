// The cache's building block: a source wrapped in the tier the options pick (the choice, its
// reason logged once, the copy made or started). OpenCached (gpufeed/cache.h) is the public
// entry, which first refuses what must not be copied; the copy a remedy starts while a loader
// runs (deferred_cache.h) comes here directly, over a source the assembly already found
// repeating. Loaders get their caches from their assembly, OpenLoader
// (gpufeed/open_loader.h), the one caller of OpenCached in gpufeed's own code.
// Thread-safety: as OpenCached.
#pragma once

#include <memory>

#include "gpufeed/cache.h"
#include "gpufeed/source.h"

namespace gpufeed {

// OpenCached's work, after its checks: the same results and errors (see gpufeed/cache.h).
// REQUIRES: `source` is not null, and its rows repeat (Source::rows_repeat) unless the tier is
// none or disk.
std::shared_ptr<Source> CacheInTier(std::shared_ptr<Source> source, const CacheOptions& options,
                                    CacheInfo* info);

}  // namespace gpufeed
