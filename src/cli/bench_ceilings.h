// The two ceilings `gpufeed bench` measures a loader's run against, with as many threads as
// the loader's workers: the memcpy of the same bytes, and the loader's work (the same batches
// of the same rows, read with Source::Read) done without the loader.
// Thread-safety: each call runs its own thread pool and returns when the threads are done;
// calls do not share state.
#pragma once

#include <cstdint>

#include "gpufeed/source.h"
#include "pipeline/sampler.h"

namespace gpufeed::cli {

// Bytes per second memcpy moves with `threads` threads, copying `total_bytes` in chunks of
// `chunk_bytes` from a source buffer larger than the caches.
double MeasureMemcpyCeiling(int64_t total_bytes, int64_t chunk_bytes, int threads);

// Samples per second `threads` threads read `epochs` epochs of `sampler`'s batches from
// `source` with Source::Read, each into its own batch buffers: the loader's work without the
// loader.
double MeasureSameWork(const Source& source, const Sampler& sampler, int epochs, int threads);

}  // namespace gpufeed::cli
