#include "cli/simulated_step.h"

#include <algorithm>
#include <thread>

namespace gpufeed::cli {
namespace {

void SleepOnTheStream(void* data) {
  auto* step = static_cast<SimulatedStep*>(data);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step->ms));
  step->slept_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count(),
      std::memory_order_relaxed);
}

}  // namespace

void EnqueueSimulatedKernel(const cuda::CudaDevice& device, SimulatedStep& step) {
  const cuda::CudaDriver& driver = device.driver();
  cuda::CurrentContextScope scope(*device.context());
  device.context()->Check(driver.LaunchHostFunc(nullptr, &SleepOnTheStream, &step),
                          "cuLaunchHostFunc");
}

void SynchronizeDefaultStream(const cuda::CudaDevice& device) {
  cuda::CurrentContextScope scope(*device.context());
  device.context()->Check(device.driver().StreamSynchronize(nullptr), "cuStreamSynchronize");
}

FinishSteps::~FinishSteps() {
  if (device == nullptr) return;
  try {
    SynchronizeDefaultStream(*device);
  } catch (...) {
  }
}

void FinalBusyWindow::Mark(std::chrono::steady_clock::time_point now, double busy_s) {
  marks_.emplace_back(now, busy_s);
  // Keep one mark at or before the window's start: the window's figure needs its left edge.
  while (marks_.size() > 2 && marks_[1].first <= now - window_) marks_.pop_front();
}

double FinalBusyWindow::Fraction() const {
  if (marks_.size() < 2) return -1;
  const double wall =
      std::chrono::duration<double>(marks_.back().first - marks_.front().first).count();
  if (wall <= 0) return -1;
  return std::min(1.0, (marks_.back().second - marks_.front().second) / wall);
}

}  // namespace gpufeed::cli
