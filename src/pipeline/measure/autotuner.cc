#include "pipeline/measure/autotuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpufeed/error.h"

namespace gpufeed {

Autotuner::Autotuner(int max_workers, int max_prefetch, int window_batches)
    : max_workers_(max_workers), max_prefetch_(max_prefetch), window_batches_(window_batches) {
  GPUFEED_ASSERT(max_workers >= 1 && max_prefetch >= 1 && window_batches >= 1,
                 "autotuner limits");
}

std::optional<TuningChange> Autotuner::Observe(const BatchTiming& t) {
  if (skip_ > 0) {
    --skip_;
    return std::nullopt;
  }
  workers_ = t.workers;
  prefetch_ = t.prefetch;
  rows_ += static_cast<double>(t.rows);
  wall_ns_ += static_cast<double>(t.consumer_wait_ns + t.step_ns);
  wait_ns_ += static_cast<double>(t.consumer_wait_ns);
  work_ns_ += static_cast<double>(t.read_ns + t.transform_ns + t.copy_ns);
  if (++batches_ < window_batches_) return std::nullopt;

  Window w;
  if (wall_ns_ > 0) {
    w.samples_per_s = rows_ / (wall_ns_ * 1e-9);
    w.wait_fraction = wait_ns_ / wall_ns_;
    w.busy_fraction = work_ns_ / (wall_ns_ * std::max(1, workers_));
  }
  batches_ = 0;
  rows_ = wall_ns_ = wait_ns_ = work_ns_ = 0;
  auto change = Decide(w, workers_, prefetch_);
  if (change) skip_ = 1;
  return change;
}

std::optional<TuningChange> Autotuner::Decide(const Window& w, int workers, int prefetch) {
  const double per_s = w.samples_per_s;
  std::string kept;
  if (trial_) {
    trial_ = false;
    const double gain = trial_baseline_ > 0 ? per_s / trial_baseline_ - 1 : 0;
    if (gain > kGain) {
      // Kept: the climb goes on from here.
      settled_.reset();
      kept = fmt::format("kept {} {} ({:+.0f}% samples/s)", trial_was_worker_ ? "workers" : "prefetch",
                         trial_was_worker_ ? workers : prefetch, 100 * gain);
    } else {
      (trial_was_worker_ ? worker_move_failed_ : prefetch_move_failed_) = true;
      settled_ = Window{trial_baseline_, w.wait_fraction, w.busy_fraction};
      return TuningChange{
          trial_from_workers_, trial_from_prefetch_,
          fmt::format("{} {} -> {} changed samples/s by {:+.0f}% (needs {:+.0f}%): back to {}",
                      trial_was_worker_ ? "workers" : "prefetch",
                      trial_was_worker_ ? trial_from_workers_ : trial_from_prefetch_,
                      trial_was_worker_ ? workers : prefetch, 100 * gain, 100 * kGain,
                      trial_was_worker_ ? trial_from_workers_ : trial_from_prefetch_)};
    }
  }
  if (settled_) {
    const auto moved = [](double now, double then) {
      return then > 0 ? std::abs(now / then - 1) > kLoadChange : now > 0;
    };
    if (moved(per_s, settled_->samples_per_s) ||
        std::abs(w.wait_fraction - settled_->wait_fraction) > kLoadChange) {
      // The load changed: moves that failed before may pay now.
      worker_move_failed_ = prefetch_move_failed_ = false;
      settled_.reset();
    }
  }
  // A kept trial with nothing further to do is reported as a change to the same values.
  const auto settle = [&]() -> std::optional<TuningChange> {
    if (!settled_) settled_ = w;
    if (kept.empty()) return std::nullopt;
    return TuningChange{workers, prefetch, kept};
  };
  if (w.wait_fraction <= kWaitTarget) return settle();
  const bool can_add_worker = workers < max_workers_ && !worker_move_failed_;
  const bool can_deepen = prefetch < max_prefetch_ && !prefetch_move_failed_;
  TuningChange change{workers, prefetch, ""};
  if (can_add_worker && (w.busy_fraction >= kBusyWorkers || !can_deepen)) {
    change.workers = workers + 1;
    trial_was_worker_ = true;
    change.reason = fmt::format(
        "consumer waited {:.0f}% of the last {} batches; {} worker(s) {:.0f}% busy: trying {}",
        100 * w.wait_fraction, window_batches_, workers, 100 * w.busy_fraction, change.workers);
  } else if (can_deepen) {
    change.prefetch = std::min(max_prefetch_, prefetch * 2);
    trial_was_worker_ = false;
    change.reason = fmt::format(
        "consumer waited {:.0f}% of the last {} batches; workers {:.0f}% busy: trying "
        "prefetch {}",
        100 * w.wait_fraction, window_batches_, 100 * w.busy_fraction, change.prefetch);
  } else {
    return settle();  // nothing left to turn: the doctor explains what would help
  }
  if (!kept.empty()) change.reason = kept + "; " + change.reason;
  trial_ = true;
  trial_from_workers_ = workers;
  trial_from_prefetch_ = prefetch;
  trial_baseline_ = per_s;
  return change;
}

}  // namespace gpufeed
