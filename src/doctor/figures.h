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
};

// Computes the figures, and the shares the Diagnosis reports whatever the verdict.
Figures Measure(const DoctorInput& in, Diagnosis& d);
// The evidence every verdict shows: the loop's wait, the stages, the CPU and the GPU.
void AddEvidence(const DoctorInput& in, const Figures& f, Diagnosis& d);

}  // namespace gpufeed::doctor
