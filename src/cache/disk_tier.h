// The disk tier (CacheTier::kDisk) as OpenCached reports it. The tier itself is the file
// system's: remote/disk_cache.h keeps the bytes, UseDiskTier (gpufeed/cache.h) turns it on
// for the process before the source is opened.
// Thread-safety: thread-safe.
#pragma once

#include "gpufeed/cache.h"
#include "gpufeed/source.h"

namespace gpufeed {

// What OpenCached says of `source` under the disk tier: tier disk, its folder, and the
// transforms the loader still runs (all of `options.transforms`: nothing is copied). Throws
// Error(kInvalidArgument) when the process's disk tier is not on (the source was opened
// without it, so its reads would not go through it).
CacheInfo DiskTierInfo(const Source& source, const CacheOptions& options);

}  // namespace gpufeed
