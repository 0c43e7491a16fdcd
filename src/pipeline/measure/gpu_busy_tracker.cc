#include "pipeline/measure/gpu_busy_tracker.h"

#include <algorithm>
#include <cmath>

namespace gpufeed {

GpuBusyTracker::GpuBusyTracker(std::shared_ptr<Device> device, int max_events)
    : device_(std::move(device)),
      timing_(TimingOf(*device_)),
      max_events_(std::max(2, max_events)) {}

GpuBusyTracker::~GpuBusyTracker() = default;

TimingEvent* GpuBusyTracker::TakeEvent() {
  if (disabled_) return nullptr;
  if (!free_.empty()) {
    TimingEvent* e = free_.back();
    free_.pop_back();
    return e;
  }
  if (static_cast<int>(events_.size()) >= max_events_) return nullptr;  // the GPU lags far
  std::unique_ptr<TimingEvent> made;
  try {
    if (timing_ != nullptr) made = timing_->NewTimingEvent();
  } catch (...) {
  }
  if (!made) {
    Disable();  // this device (or driver) cannot time its streams
    return nullptr;
  }
  events_.push_back(std::move(made));
  return events_.back().get();
}

void GpuBusyTracker::Disable() {
  disabled_ = true;
  pending_idle_step_ = -1;
  marks_.clear();  // their events may never complete; the figures would be partial anyway
}

bool GpuBusyTracker::EndStep() {
  MutexLock lock(&mu_);
  if (!step_started_ || step_ended_ || disabled_) {
    step_ended_ = true;
    return false;
  }
  step_ended_ = true;
  try {
    // Querying a capturing stream would invalidate the consumer's CUDA graph capture: the
    // step stays without an end event, so it gets no busy figure.
    if (timing_ == nullptr || timing_->StreamCapturing(step_stream_)) return false;
    // Before the end event: a recorded event is itself work the stream has not done yet.
    const bool drained = timing_->StreamDrained(step_stream_);
    if (drained) ++totals_.drained_steps;
    TimingEvent* event = TakeEvent();
    if (event == nullptr) return drained;
    if (!RecordOrSkip(event, step_stream_)) return drained;
    marks_.push_back(Mark{false, step_, step_epoch_, step_batch_, step_stream_, event});
    return drained;
  } catch (...) {
    Disable();  // measuring never breaks the consumer's loop
    return false;
  }
}

bool GpuBusyTracker::RecordOrSkip(TimingEvent* event, uintptr_t stream) {
  try {
    event->Record(stream);
    record_failures_ = 0;
    return true;
  } catch (...) {
    // One failure (a stream of another context, say) costs this step's figure; only a
    // driver that keeps refusing turns measuring off.
    free_.push_back(event);
    if (++record_failures_ >= kMaxRecordFailures) Disable();
    return false;
  }
}

int64_t GpuBusyTracker::BeginStep(int64_t epoch, int64_t batch) {
  MutexLock lock(&mu_);
  ++step_;
  step_epoch_ = epoch;
  step_batch_ = batch;
  step_started_ = false;
  step_ended_ = false;
  return step_;
}

void GpuBusyTracker::MarkStart(int64_t step, uintptr_t stream) {
  MutexLock lock(&mu_);
  if (disabled_ || step != step_ || step_started_ || step_ended_ || step_batch_ < 0) return;
  try {
    if (timing_ == nullptr || timing_->StreamCapturing(stream)) return;  // the user's graph
    TimingEvent* event = TakeEvent();
    if (event == nullptr) return;
    if (!RecordOrSkip(event, stream)) return;
    marks_.push_back(Mark{true, step_, step_epoch_, step_batch_, stream, event});
    step_started_ = true;
    step_stream_ = stream;
    ++totals_.marked_steps;
  } catch (...) {
    Disable();
  }
}

void GpuBusyTracker::Harvest(const std::function<void(const GpuStepFigure&)>& on_figure) {
  MutexLock lock(&mu_);
  try {
    HarvestLocked(on_figure);
  } catch (...) {
    Disable();  // a driver error or a failed allocation: figures stop, the loop goes on
  }
}

void GpuBusyTracker::HarvestLocked(const std::function<void(const GpuStepFigure&)>& on_figure) {
  // The newest mark stays: its event opens the next interval.
  while (marks_.size() >= 2) {
    const Mark& a = marks_[0];
    const Mark& b = marks_[1];
    if (!b.event->IsDone() || !a.event->IsDone()) break;  // stream order: the rest is later
    const bool same_stream = a.stream == b.stream;
    const bool busy = a.is_start && !b.is_start && a.step == b.step;
    const bool idle = !a.is_start && b.is_start && b.step == a.step + 1;
    if (same_stream && (busy || idle)) {
      if (const auto ms = b.event->MillisecondsSince(*a.event)) {
        const int64_t ns = std::max<int64_t>(0, std::llround(*ms * 1e6));
        GpuStepFigure figure{b.step, b.epoch, b.batch, -1, -1};
        if (idle) {
          figure.idle_ns = ns;
          pending_idle_step_ = b.step;
          pending_idle_ns_ = ns;
        } else {
          figure.busy_ns = ns;
          if (pending_idle_step_ == b.step) {
            ++totals_.steps;
            totals_.busy_ns += ns;
            totals_.idle_ns += pending_idle_ns_;
            pending_idle_step_ = -1;
          }
        }
        if (on_figure) on_figure(figure);
      }
    }
    free_.push_back(a.event);
    marks_.pop_front();
  }
}

GpuBusyTotals GpuBusyTracker::Totals() const {
  MutexLock lock(&mu_);
  return totals_;
}

}  // namespace gpufeed
