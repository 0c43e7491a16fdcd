// The simulated GPU of `gpufeed bench` and `gpufeed demo`: a step of fixed length per batch,
// on the host (a sleep) or, on a CUDA device, as work on the default stream that the loader
// times with events; and the busy share of the run's last seconds.
// Thread-safety: SimulatedStep's counter is atomic (the stream's host function adds to it);
// the rest is used on the bench's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>

#include "device/cuda_device.h"

namespace gpufeed::cli {

// The simulated step's kernel on a CUDA stream: a host function the stream runs in its
// order, sleeping the step's length. The stream is busy for it as for a real kernel, after
// the batch's copy, so the loader's events time it; a real GPU runs it on a driver thread.
// It adds the time it actually slept (a loaded machine oversleeps) for the busy figure.
struct SimulatedStep {
  double ms = 0;
  std::atomic<int64_t> slept_ns{0};
};

// Enqueues the kernel on the legacy default stream (torch's default) without waiting for it:
// the next batch's WaitOn orders the next step after it, and the host runs ahead as a
// training loop does between its synchronizations.
void EnqueueSimulatedKernel(const cuda::CudaDevice& device, SimulatedStep& step);
void SynchronizeDefaultStream(const cuda::CudaDevice& device);

// Steps the bench keeps queued on the GPU before it waits for the oldest, as a loop that
// reads its loss (loss.item()) every few steps would: the stream does not run dry at each
// Next(), so the doctor sees a GPU fed by the loader, not one waiting for the host.
constexpr size_t kStepsInFlight = 2;

// Queued steps point at the run's SimulatedStep: on every way out (an error in Next()
// included) the stream finishes them before it goes.
struct FinishSteps {
  const cuda::CudaDevice* device = nullptr;
  ~FinishSteps();
};

// The simulated GPU's busy share over the last `window` of a run: fed the busy seconds so
// far after each batch, it keeps the marks of the window (and one before it).
class FinalBusyWindow {
 public:
  explicit FinalBusyWindow(std::chrono::steady_clock::duration window) : window_(window) {}
  void Mark(std::chrono::steady_clock::time_point now, double busy_s);
  // Busy seconds over wall seconds from the oldest mark in the window to the last (that
  // span is shorter than the window on a short run); -1 when fewer than two marks.
  double Fraction() const;

 private:
  std::chrono::steady_clock::duration window_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, double>> marks_;
};

}  // namespace gpufeed::cli
