// Where a loader stands in its plan: EpochOrders (the plans of the epochs in use, one of
// which may start part-way into its epoch's global order after a restore at another world
// size), how far its read-ahead hints went (HintedUpTo), the LoaderState a loader saves, and
// where a restored state resumes (ResumeAt).
//
// The invariant that lets a state move between world sizes: an epoch's global order is a
// function of (seed, epoch, the data set, the shuffle mode) and never of the world size or the
// rank (pipeline/sampler.h); a state records how far along that order all ranks together went
// (LoaderState::global_consumed), and a loader at another world size deals the rest.
//
// Thread-safety: EpochOrders and HintedUpTo are thread-safe; the functions depend on their
// arguments only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "core/thread_annotations.h"
#include "gpufeed/loader_options.h"
#include "gpufeed/loader_stats.h"
#include "gpufeed/source.h"
#include "pipeline/sampler.h"

namespace gpufeed {

// The plans of the epochs in use, made once per epoch and shared by the workers. A plain plan
// is a few bytes (workers compute each batch's samples); a packed plan holds the packing.
class EpochOrders {
 public:
  explicit EpochOrders(const Sampler& sampler) : sampler_(sampler) {}

  std::shared_ptr<const EpochPlan> Of(int64_t epoch) EXCLUDES(mu_);
  // Epoch `epoch` deals its global order from position `start` on (0: all of it); every other
  // epoch is whole. REQUIRES: no worker is planning (the loader's workers are stopped).
  void SetStart(int64_t epoch, int64_t start) EXCLUDES(mu_);
  // The position epoch `epoch` starts from, and this rank's batches in it.
  int64_t StartOf(int64_t epoch) const EXCLUDES(mu_);
  int64_t Batches(int64_t epoch) const EXCLUDES(mu_);

 private:
  const Sampler& sampler_;
  mutable Mutex mu_;
  std::map<int64_t, std::shared_ptr<const EpochPlan>> orders_ GUARDED_BY(mu_);
  int64_t start_epoch_ GUARDED_BY(mu_) = -1;
  int64_t start_ GUARDED_BY(mu_) = 0;
};

// The run sequence numbers a loader's read-ahead has hinted: each is hinted once, by the first
// claim whose hints reach it.
class HintedUpTo {
 public:
  // A new run: nothing hinted.
  void Reset() { last_.store(-1, std::memory_order_relaxed); }
  // The numbers (first, last] that the claim of `seq`, its hints reaching `reach`, hints now:
  // those past `seq` no claim hinted before. Empty (first >= last) when there are none.
  std::pair<int64_t, int64_t> Take(int64_t seq, int64_t reach) {
    int64_t from = last_.load(std::memory_order_relaxed);
    while (from < reach && !last_.compare_exchange_weak(from, reach, std::memory_order_relaxed)) {
    }
    return {std::max(from, seq), from < reach ? reach : from};
  }

 private:
  std::atomic<int64_t> last_{-1};
};

// The state of a loader whose consumer is at batch `batch` of `epoch`, that epoch starting at
// position `start` of its global order.
LoaderState SaveState(const Sampler& sampler, const LoaderOptions& options, const Source& source,
                      int64_t epoch, int64_t batch, int64_t start);

// Where a restored state resumes: batch `batch` of the plan of `epoch` that starts at position
// `start` of the epoch's global order.
struct ResumePoint {
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t start = 0;
};

// Throws Error(kInvalidArgument) unless `state` was saved by a loader like this one: one at
// the same rank and world size, or, for a state that records global_consumed, at any (packed
// groups: only at an epoch's boundary).
ResumePoint ResumeAt(const LoaderState& state, const LoaderOptions& options, const Sampler& sampler,
                     const Source& source);

}  // namespace gpufeed
