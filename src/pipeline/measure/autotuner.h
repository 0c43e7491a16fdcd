// Autotuner: turns the loader's two knobs, active workers and prefetch depth, by hill
// climbing on what it measures over windows of a few batches: the consumer's wait in
// Next() and the samples per second delivered.
//
// Each window it either judges a pending trial (keep the change when throughput rose by
// more than kGain, else go back and remember that move failed) or, while the consumer still
// waits more than kWaitTarget of its time, tries one move: another worker when the workers
// are busy (CPU-bound stages scale with threads), else a deeper prefetch (absorbs jitter).
// A failed move is not retried until the load changes (throughput or wait moves by more
// than kLoadChange from where the tuner settled), so it settles instead of oscillating.
//
// Pure logic over BatchTiming records: no clock, no threads, so every rule is unit-tested
// on recorded figures. Thread-safety: one thread at a time (the loader's consumer).
#pragma once

#include <optional>
#include <string>

#include "gpufeed/loader_stats.h"

namespace gpufeed {

struct TuningChange {
  int workers = 0;
  int prefetch = 0;
  // "consumer waited 41% of 4 batches at 1 worker(s), workers 93% busy: trying 2 workers"
  std::string reason;
};

class Autotuner {
 public:
  static constexpr double kWaitTarget = 0.02;   // below this the loader keeps up
  static constexpr double kGain = 0.05;         // a trial must raise samples/s by this much
  static constexpr double kLoadChange = 0.25;   // a shift this large re-opens failed moves
  static constexpr double kBusyWorkers = 0.75;  // workers this busy are the bottleneck

  // REQUIRES: max_workers >= 1, max_prefetch >= 1, window_batches >= 1.
  Autotuner(int max_workers, int max_prefetch, int window_batches = 4);

  // Feeds one finished batch (its step_ns known). Returns the change to make, if any.
  std::optional<TuningChange> Observe(const BatchTiming& timing);

 private:
  struct Window {
    double samples_per_s = 0;
    double wait_fraction = 0;
    double busy_fraction = 0;
  };
  std::optional<TuningChange> Decide(const Window& w, int workers, int prefetch);

  const int max_workers_;
  const int max_prefetch_;
  const int window_batches_;

  // The window being filled.
  int batches_ = 0;
  int skip_ = 1;  // batches to ignore after a change: the pipeline refills
  double rows_ = 0, wall_ns_ = 0, wait_ns_ = 0, work_ns_ = 0;
  int workers_ = 0, prefetch_ = 0;

  // A trial under way: what to return to and what it must beat.
  bool trial_ = false;
  int trial_from_workers_ = 0, trial_from_prefetch_ = 0;
  double trial_baseline_ = 0;
  bool trial_was_worker_ = false;

  bool worker_move_failed_ = false;
  bool prefetch_move_failed_ = false;
  std::optional<Window> settled_;  // where the tuner stopped, to notice a change of load
};

}  // namespace gpufeed
