// GpuBusyTracker: measures, on the GPU's own clock, when the consumer's stream worked on a
// training step and when it sat waiting for the next batch. It exists only once the consumer
// names its stream (Batch::WaitOn, __dlpack__(stream=...)); without one it records nothing.
//
// Two timing events per step, both on the consumer's stream:
//   start_i  recorded right after batch i's WaitOn: it completes when the stream has passed
//            the wait for batch i's copy (and the work queued before it), i.e. when the GPU
//            may begin step i.
//   end_i    recorded when the loop calls Next() again: everything of step i is queued by
//            then, so it completes when the GPU has finished step i, or at the Next() call
//            itself when the GPU was done earlier.
// On the stream's timeline  ... end_{i-1} | idle_i | start_i | busy_i | end_i | idle_{i+1} ...
//   idle_i = elapsed(end_{i-1}, start_i): the GPU waited for batch i. It starts when both the
//            GPU had finished step i-1 and the loop had asked for batch i, and lasts until
//            batch i was on the GPU: the loop blocked in Next() (data late: read, transform)
//            or the copy still in flight after Next() returned (copy late), plus the loop's
//            own time from Next() to WaitOn (microseconds in a plain loop).
//   busy_i = elapsed(start_i, end_i): everything else in the step. It is an upper bound on
//            the GPU's work: when the host is late (the GPU finished before the loop called
//            Next(): launch overhead, a synchronization, host work longer than the kernels),
//            the GPU's wait for the host falls inside busy_i, because end_i cannot complete
//            before it is recorded. Such steps are flagged "drained": the stream had no work
//            left when the loop called Next() (cuStreamQuery). So idle says exactly how long
//            the GPU waited for gpufeed, and drained steps say the host, not the data, is late.
// The busy fraction is sum(busy) / sum(busy + idle) over the steps with both figures: the
// share of the GPU's time not spent waiting for batches. A step across the end of an epoch
// gets no idle figure (the loop's work between epochs is not a wait for data), nor does a
// step whose start was recorded on another stream than the previous end.
//
// Events come from a ring of at most `max_events` reusable timing events, made as needed and
// never freed before the tracker: a GPU that lags further behind than the ring leaves the
// newest steps unmeasured rather than costing an allocation. Completed events are harvested
// lazily with non-blocking queries; nothing here ever waits for the GPU. No error here ever
// reaches the consumer: a failed record skips its step, kMaxRecordFailures in a row (or any
// other driver error or failed allocation) stop the measuring for good. A stream that is
// capturing a CUDA graph is neither queried nor recorded on (either would break the capture):
// its steps go unmeasured.
//
// Thread-safety: thread-safe (one mutex). EndStep and BeginStep are called by the loader's
// consumer thread, MarkStart by whatever thread calls Batch::WaitOn, Harvest and Totals by
// any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/thread_annotations.h"
#include "device/device_features.h"
#include "gpufeed/device.h"

namespace gpufeed {

// One harvested figure of one step; the other field is -1.
struct GpuStepFigure {
  int64_t step = -1;  // the tracker's step id (BeginStep's): unique, increasing
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t busy_ns = -1;
  int64_t idle_ns = -1;
};

struct GpuBusyTotals {
  int64_t steps = 0;    // steps with both figures: what the sums below cover
  int64_t busy_ns = 0;  // summed over those steps
  int64_t idle_ns = 0;
  int64_t drained_steps = 0;  // steps whose stream had run dry when the loop called Next()
  int64_t marked_steps = 0;   // steps with a start event (measured or still in flight)
};

class GpuBusyTracker {
 public:
  static constexpr int kDefaultMaxEvents = 64;
  static constexpr int kMaxRecordFailures = 8;  // in a row: then measuring stops

  explicit GpuBusyTracker(std::shared_ptr<Device> device, int max_events = kDefaultMaxEvents);
  ~GpuBusyTracker();
  GpuBusyTracker(const GpuBusyTracker&) = delete;
  GpuBusyTracker& operator=(const GpuBusyTracker&) = delete;

  // The loop called Next(): the current step ends. Records its end event when the step has
  // a start event. Returns true when the step's stream had already run out of work.
  bool EndStep();
  // Next() handed out batch (epoch, batch), or (-1, -1) for the end of an epoch: a new step
  // begins. Returns its id, for MarkStart.
  int64_t BeginStep(int64_t epoch, int64_t batch);
  // The loader restarted (SetEpoch, Restore): the open step is dropped unmeasured, so neither
  // its busy figure nor the next step's idle figure covers the restart.
  void DropStep() { BeginStep(-1, -1); }
  // The consumer made `stream` wait for step `step`'s batch: records the step's start event,
  // once, when `step` is the current step.
  void MarkStart(int64_t step, uintptr_t stream);
  // Takes the figures of every completed event pair so far, in stream order, without
  // blocking, and adds them to the totals; calls `on_figure` for each (under the tracker's
  // lock: it must not call back into the tracker).
  void Harvest(const std::function<void(const GpuStepFigure&)>& on_figure);
  GpuBusyTotals Totals() const;

 private:
  struct Mark {
    bool is_start = false;
    int64_t step = 0;
    int64_t epoch = 0;
    int64_t batch = 0;
    uintptr_t stream = 0;
    TimingEvent* event = nullptr;
  };

  // Null when the ring is spent or disabled.
  TimingEvent* TakeEvent() REQUIRES(mu_);
  void Disable() REQUIRES(mu_);
  // Records `event` on `stream`; on failure hands the event back and returns false.
  bool RecordOrSkip(TimingEvent* event, uintptr_t stream) REQUIRES(mu_);
  void HarvestLocked(const std::function<void(const GpuStepFigure&)>& on_figure) REQUIRES(mu_);

  std::shared_ptr<Device> device_;
  StreamTiming* const timing_;  // null: the device cannot time its streams
  const int max_events_;
  mutable Mutex mu_;
  bool disabled_ GUARDED_BY(mu_) = false;
  // Every event made, at most max_events_.
  std::vector<std::unique_ptr<TimingEvent>> events_ GUARDED_BY(mu_);
  std::vector<TimingEvent*> free_ GUARDED_BY(mu_);
  std::deque<Mark> marks_ GUARDED_BY(mu_);  // recorded, not yet harvested, in stream order
  int64_t step_ GUARDED_BY(mu_) = -1;       // the current step
  int64_t step_epoch_ GUARDED_BY(mu_) = -1;
  int64_t step_batch_ GUARDED_BY(mu_) = -1;
  bool step_started_ GUARDED_BY(mu_) = false;
  bool step_ended_ GUARDED_BY(mu_) = false;
  uintptr_t step_stream_ GUARDED_BY(mu_) = 0;
  // The step whose idle figure came, waiting for its busy one.
  int64_t pending_idle_step_ GUARDED_BY(mu_) = -1;
  int64_t pending_idle_ns_ GUARDED_BY(mu_) = 0;
  int record_failures_ GUARDED_BY(mu_) = 0;  // in a row
  GpuBusyTotals totals_ GUARDED_BY(mu_);
};

}  // namespace gpufeed
