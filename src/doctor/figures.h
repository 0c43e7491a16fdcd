// The doctor's shared figures: what every rule reads, computed once from a DoctorInput
// (sums over the batches, the usable cores, the RAM budget, how the GPU's busy share was
// measured), and the evidence every verdict shows. Internal to the doctor part.
// Thread-safety: pure functions over values.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/doctor.h"

namespace gpufeed::doctor {

constexpr int64_t kMinEventSteps = 8;  // fewer timed steps than this are an anecdote

inline double Ms(double ns) { return ns * 1e-6; }
inline std::string Gb(double bytes) { return fmt::format("{:.1f} GB", bytes / 1e9); }
inline std::string Pct(double ratio) { return fmt::format("{:.0f}%", 100 * ratio); }

struct Totals {
  double n = 0, rows = 0;
  double wait = 0, step = 0, read = 0, transform = 0, copy = 0, buffer_wait = 0;
  // Over the batches with both event figures: the GPU's busy and idle time, and the loop's
  // wait in Next() for those same batches; and, step by step, the GPU's wait beyond the loop's
  // (the copy's lag: one long wait in Next() must not cancel the lag of other steps).
  double gpu_busy = 0, gpu_idle = 0, gpu_loop_wait = 0, gpu_copy_lag = 0;
  // The critical path: where the batches were while the loop waited (BatchTiming::waited_*).
  double waited_queued = 0, waited_buffer = 0, waited_read = 0, waited_transform = 0,
         waited_copy = 0, waited_handoff = 0;
  // Of the loop's wait, the time the loader's threads on its path were runnable but not
  // running (the consumer's own run-queue delay, and the building worker's in proportion to
  // the part of its build the loop waited on), over the batches where the kernel told it.
  double starved = 0;
  double runqueue_batches = 0;  // batches with run-queue figures
  double wait_with_runqueue = 0;  // the loop's wait over those batches

  double WaitedTotal() const {
    return waited_queued + waited_buffer + waited_read + waited_transform + waited_copy +
           waited_handoff;
  }
};

Totals Sum(const std::vector<BatchTiming>& batches);

// The figures every rule reads, computed once from the input.
struct Figures {
  Totals t;
  double consumer = 0;  // the loop's time: its waits in Next() plus its steps
  int workers = 1;
  double usable = 1;  // cores: the CPU count, or the cgroup quota where lower
  double batch_bytes = 0;
  double set_bytes = 0;
  std::optional<double> ram_budget;  // for a cache
  int64_t min_event_steps = 0;
  bool events = false;  // enough steps timed by events on the training stream to judge by
  std::optional<double> gpu_busy;  // by events, else NVML's utilization
  std::string gpu_how;             // how gpu_busy was measured, for the text

  double PerBatch(double ns) const { return Ms(ns / t.n); }
  // The loop's measured time in seconds (its waits plus its steps).
  double ConsumerSeconds() const { return consumer * 1e-9; }
};

// Computes the figures, and the shares the Diagnosis reports whatever the verdict.
Figures Measure(const DoctorInput& in, Diagnosis& d);
// The evidence every verdict shows: the loop's wait, the stages, the CPU and the GPU.
void AddEvidence(const DoctorInput& in, const Figures& f, Diagnosis& d);

}  // namespace gpufeed::doctor
