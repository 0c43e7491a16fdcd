// The loader's checks of what it is given: its options (filled in and bounded), the source,
// a saved state against this loader, and the one-line advice on a costly shuffle. Functions
// of their arguments only. Thread-safety: stateless.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "gpufeed/loader_options.h"
#include "gpufeed/loader_stats.h"
#include "gpufeed/source.h"
#include "pipeline/sampler.h"

namespace gpufeed {

// The sampler's options from the loader's (and the source's preferred block).
SamplerOptions ToSamplerOptions(const LoaderOptions& o, const Source& source);
// `o` with every automatic value filled in; Error(kInvalidArgument) for values out of range.
LoaderOptions CheckOptions(LoaderOptions o);
// Batches kept ready by default (LoaderOptions::prefetch = 0): 2 per worker, the depth
// DataLoader's prefetch_factor=2 keeps, but within kDefaultPrefetchBytes of batches and at
// least 2 (or 2 per worker, if that is fewer). Big batches are memory the process must fault
// in (pinned memory on a GPU host): at batch 8192 of 8 KB rows, 2 workers kept 4 ready
// batches of 67 MB, 7 buffers in all with the workers' and the consumer's; the simulated GPU
// at a 10 ms step was as busy with 2 ready (0.95-0.98 against 0.96-0.99, README), and a new
// process faulted in 134 MB less (0.3 s on the VM after an idle spell).
inline constexpr size_t kDefaultPrefetchBytes = size_t{128} << 20;
// Within `max_prefetch` where it is set (> 0).
int DefaultPrefetch(int workers, size_t batch_bytes, int max_prefetch = 0);
// Prefetched batches are memory: under the autotuner, keep the deepest it may go within a
// quarter of the RAM available now.
void ResolveMaxPrefetch(LoaderOptions& o, size_t buffer_bytes);
// A full shuffle over compressed chunks decodes a chunk for every few samples read: often
// 50-140x slower than block shuffle. Estimates the decodes per epoch and, past ~4 per chunk,
// says so once with the fixes that apply.
void AdviseOnShuffle(const Source& source, const Sampler& sampler);
// *source; Error(kInvalidArgument) when it is null.
const Source& CheckSource(const std::shared_ptr<Source>& source);
// The shuffle mode as LoaderState records it: "none", "full" or "block:N:W".
std::string ShuffleMode(const Sampler& sampler);
// What the data set holds, for LoaderState::data: the XXH3 hash of three samples' bytes (the
// first, the middle and the last), so a state saved over another file of the same length and
// fields is told apart wherever the data now lives (another path, a copy on local disk).
// nullopt where the source cannot be read on the host (the device tier) or the read fails.
std::optional<std::string> DataFingerprint(const Source& source);
// Throws Error(kInvalidArgument) unless `state` was saved by a loader like this one (the rank and
// world size aside: ResumeAt in pipeline/loader_state.h decides) and names a position; a state
// that records its data (LoaderState::data) must match this loader's DataFingerprint.
void CheckRestorable(const LoaderState& state, const LoaderOptions& options, const Sampler& sampler,
                     const Source& source);

}  // namespace gpufeed
