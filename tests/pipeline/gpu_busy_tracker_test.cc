// GpuBusyTracker on scripted events: the test plays the GPU, completing each recorded event
// at a chosen time, so every figure is exact and no clock or thread is involved.
#include "pipeline/measure/gpu_busy_tracker.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

namespace gpufeed {
namespace {

// Every Record() is one entry of a log; the test completes entries by index.
struct Timeline {
  struct Entry {
    uintptr_t stream = 0;
    bool done = false;
    double ms = 0;
  };
  std::vector<Entry> entries;
  int events_made = 0;
  bool refuse_records = false;
  bool throw_on_query = false;  // IsDone and StreamDrained throw, as a broken device might
  std::map<uintptr_t, bool> drained;
  std::map<uintptr_t, bool> capturing;
  int queries = 0;  // StreamDrained calls

  void Complete(size_t index, double ms) {
    entries.at(index).done = true;
    entries.at(index).ms = ms;
  }
};

class ScriptedEvent : public TimingEvent {
 public:
  explicit ScriptedEvent(Timeline& timeline) : timeline_(timeline) {}
  void Record(uintptr_t stream) override {
    if (timeline_.refuse_records) throw std::runtime_error("record refused");
    index_ = timeline_.entries.size();
    timeline_.entries.push_back({stream, false, 0});
  }
  bool IsDone() override {
    if (timeline_.throw_on_query) throw std::runtime_error("query failed");
    return timeline_.entries.at(index_).done;
  }
  std::optional<double> MillisecondsSince(TimingEvent& earlier) override {
    auto& start = static_cast<ScriptedEvent&>(earlier);
    const auto& a = timeline_.entries.at(start.index_);
    const auto& b = timeline_.entries.at(index_);
    if (!a.done || !b.done) return std::nullopt;
    return b.ms - a.ms;
  }

 private:
  Timeline& timeline_;
  size_t index_ = 0;
};

// The host device, with scripted timing events and stream states.
class ScriptedDevice : public Device, public StreamTiming {
 public:
  explicit ScriptedDevice(Timeline& timeline, bool can_time = true)
      : timeline_(timeline), can_time_(can_time) {}
  DeviceType type() const override { return DeviceType::kCuda; }
  int ordinal() const override { return 0; }
  std::string name() const override { return "scripted"; }
  bool needs_copy() const override { return false; }
  void* AllocHost(size_t bytes) override { return host_->AllocHost(bytes); }
  void FreeHost(void* ptr) noexcept override { host_->FreeHost(ptr); }
  void* AllocDevice(size_t bytes) override { return host_->AllocDevice(bytes); }
  void FreeDevice(void* ptr) noexcept override { host_->FreeDevice(ptr); }
  std::unique_ptr<DeviceStream> NewStream() override { return host_->NewStream(); }
  std::shared_ptr<DeviceEvent> RecordOn(uintptr_t stream) override {
    return host_->RecordOn(stream);
  }
  DeviceMemoryInfo MemoryInfo() override { return host_->MemoryInfo(); }
  std::unique_ptr<TimingEvent> NewTimingEvent() override {
    if (!can_time_) return nullptr;
    ++timeline_.events_made;
    return std::make_unique<ScriptedEvent>(timeline_);
  }
  bool StreamDrained(uintptr_t stream) override {
    if (timeline_.throw_on_query) throw std::runtime_error("query failed");
    ++timeline_.queries;
    return timeline_.drained[stream];
  }
  bool StreamCapturing(uintptr_t stream) override { return timeline_.capturing[stream]; }

 private:
  Timeline& timeline_;
  bool can_time_;
  std::shared_ptr<Device> host_ = HostDevice();
};

std::vector<GpuStepFigure> HarvestAll(GpuBusyTracker& tracker) {
  std::vector<GpuStepFigure> figures;
  tracker.Harvest([&](const GpuStepFigure& f) { figures.push_back(f); });
  return figures;
}

constexpr uintptr_t kStream = 0x7000;

// One step of the loop: Next() hands out (epoch, batch), the consumer waits on `stream`.
void Step(GpuBusyTracker& tracker, int64_t epoch, int64_t batch, uintptr_t stream = kStream) {
  tracker.EndStep();
  tracker.MarkStart(tracker.BeginStep(epoch, batch), stream);
}

TEST(GpuBusyTracker, BusyAndIdleComeFromTheGapsBetweenStartAndEndEvents) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  Step(tracker, 0, 0);  // entry 0: start of batch 0
  Step(tracker, 0, 1);  // 1: end of batch 0, 2: start of batch 1
  Step(tracker, 0, 2);  // 3: end of batch 1, 4: start of batch 2
  ASSERT_EQ(gpu.entries.size(), 5u);
  // Batch 0 computes 10 ms; batch 1 arrives 2 ms after, computes 10 ms; batch 2 is 8 ms late.
  gpu.Complete(0, 0);
  gpu.Complete(1, 10);
  gpu.Complete(2, 12);
  EXPECT_TRUE(HarvestAll(tracker).size() == 2);  // busy of 0, idle of 1; entry 3 pending
  EXPECT_EQ(tracker.Totals().steps, 0);          // batch 1's busy figure is not known yet
  gpu.Complete(3, 22);
  gpu.Complete(4, 30);
  const auto figures = HarvestAll(tracker);
  ASSERT_EQ(figures.size(), 2u);
  EXPECT_EQ(figures[0].batch, 1);
  EXPECT_EQ(figures[0].busy_ns, 10'000'000);
  EXPECT_EQ(figures[0].idle_ns, -1);
  EXPECT_EQ(figures[1].batch, 2);
  EXPECT_EQ(figures[1].idle_ns, 8'000'000);
  const GpuBusyTotals t = tracker.Totals();
  EXPECT_EQ(t.steps, 1);  // batch 1: idle 2 ms, busy 10 ms; batch 0 has no idle figure
  EXPECT_EQ(t.busy_ns, 10'000'000);
  EXPECT_EQ(t.idle_ns, 2'000'000);
  EXPECT_EQ(t.marked_steps, 3);
}

TEST(GpuBusyTracker, HarvestNeverWaitsAndTakesNothingBeforeTheGpuGetsThere) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  for (int b = 0; b < 4; ++b) Step(tracker, 0, b);
  EXPECT_TRUE(HarvestAll(tracker).empty());
  gpu.Complete(0, 0);
  EXPECT_TRUE(HarvestAll(tracker).empty());  // the end of batch 0 is still pending
}

TEST(GpuBusyTracker, NoStreamNamedRecordsNothing) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  for (int b = 0; b < 10; ++b) {
    EXPECT_FALSE(tracker.EndStep());
    tracker.BeginStep(0, b);
  }
  EXPECT_EQ(gpu.events_made, 0);
  EXPECT_TRUE(gpu.entries.empty());
  EXPECT_EQ(tracker.Totals().marked_steps, 0);
}

TEST(GpuBusyTracker, TheEndOfAnEpochAndAnotherStreamBreakTheIdleFigure) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  Step(tracker, 0, 0);                                     // 0
  tracker.EndStep();                                       // 1: end of batch 0
  const int64_t end_of_epoch = tracker.BeginStep(-1, -1);  // Next() returned no batch
  tracker.MarkStart(end_of_epoch, kStream);                // nothing to wait for: ignored
  Step(tracker, 1, 0);               // 2: start of epoch 1's batch 0 (the end step had none)
  Step(tracker, 1, 1, kStream + 1);  // 3: end of (1, 0); 4: start of (1, 1) on another stream
  ASSERT_EQ(gpu.entries.size(), 5u);
  for (size_t i = 0; i < gpu.entries.size(); ++i) gpu.Complete(i, 10.0 * static_cast<double>(i));
  const auto figures = HarvestAll(tracker);
  ASSERT_EQ(figures.size(), 2u);  // only the two busy figures
  EXPECT_EQ(figures[0].epoch, 0);
  EXPECT_EQ(figures[0].busy_ns, 10'000'000);
  EXPECT_EQ(figures[1].epoch, 1);
  EXPECT_EQ(figures[1].batch, 0);
  EXPECT_EQ(figures[1].busy_ns, 10'000'000);
  EXPECT_EQ(tracker.Totals().steps, 0);
}

TEST(GpuBusyTracker, OnlyTheFirstWaitOnOfTheCurrentBatchMarksItsStart) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  const int64_t first = tracker.BeginStep(0, 0);
  tracker.MarkStart(first, kStream);
  tracker.MarkStart(first, kStream);  // a second field's __dlpack__
  tracker.EndStep();
  tracker.BeginStep(0, 1);
  tracker.MarkStart(first, kStream);  // an older batch: not the step that runs now
  EXPECT_EQ(gpu.entries.size(), 2u);
}

TEST(GpuBusyTracker, ARingOfEventsIsReusedAndALaggingGpuLeavesStepsUnmeasured) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu), 8);
  double now = 0;
  for (int b = 0; b < 200; ++b) {
    Step(tracker, 0, b);
    // The GPU keeps up: everything recorded so far completes 5 ms apart.
    for (auto& e : gpu.entries) {
      if (!e.done) {
        e.done = true;
        e.ms = now += 5;
      }
    }
    HarvestAll(tracker);
  }
  EXPECT_LE(gpu.events_made, 3);  // start, end, next start: reused ever after
  EXPECT_EQ(tracker.Totals().steps, 198);
  EXPECT_EQ(tracker.Totals().busy_ns, 198 * 5'000'000);
  // Now the GPU stops: once the 8 events are all in flight (one already is), the newest
  // steps go unmeasured, with no event made beyond the ring.
  const size_t before = gpu.entries.size();
  for (int b = 200; b < 220; ++b) Step(tracker, 0, b);
  EXPECT_EQ(gpu.events_made, 8);
  EXPECT_EQ(gpu.entries.size() - before, 7u);
}

TEST(GpuBusyTracker, DrainedStepsAreCountedWhenTheStreamRanDry) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  Step(tracker, 0, 0);
  gpu.drained[kStream] = true;
  EXPECT_TRUE(tracker.EndStep());
  tracker.MarkStart(tracker.BeginStep(0, 1), kStream);
  gpu.drained[kStream] = false;
  EXPECT_FALSE(tracker.EndStep());
  EXPECT_EQ(tracker.Totals().drained_steps, 1);
}

TEST(GpuBusyTracker, ADeviceThatCannotTimeOrADriverErrorTurnsMeasuringOff) {
  {
    Timeline gpu;
    GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu, false));
    for (int b = 0; b < 5; ++b) Step(tracker, 0, b);
    EXPECT_TRUE(HarvestAll(tracker).empty());
    EXPECT_EQ(tracker.Totals().marked_steps, 0);
  }
  {
    Timeline gpu;
    GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
    Step(tracker, 0, 0);
    gpu.refuse_records = true;
    for (int b = 1; b <= GpuBusyTracker::kMaxRecordFailures; ++b) {
      EXPECT_NO_THROW(Step(tracker, 0, b));
    }
    gpu.refuse_records = false;
    Step(tracker, 0, 100);
    EXPECT_EQ(gpu.entries.size(), 1u);  // off for good after failures in a row
    EXPECT_EQ(tracker.Totals().marked_steps, 1);
  }
}

// A record refused once (a stream of another context) skips that step; the run goes on.
TEST(GpuBusyTracker, OneRefusedRecordSkipsItsStepOnly) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  Step(tracker, 0, 0);  // entry 0: start 0
  gpu.refuse_records = true;
  EXPECT_NO_THROW(tracker.EndStep());  // end 0 refused
  gpu.refuse_records = false;
  tracker.MarkStart(tracker.BeginStep(0, 1), kStream);  // entry 1: start 1
  Step(tracker, 0, 2);                                  // 2: end 1, 3: start 2
  Step(tracker, 0, 3);                                  // 4: end 2, 5: start 3
  ASSERT_EQ(gpu.entries.size(), 6u);
  const double ms[] = {0, 1, 11, 12, 22, 23};
  for (size_t i = 0; i < 6; ++i) gpu.Complete(i, ms[i]);
  HarvestAll(tracker);
  const GpuBusyTotals t = tracker.Totals();
  EXPECT_EQ(t.steps, 1);  // step 2: idle 1 ms, busy 10 ms; step 1 has no idle figure
  EXPECT_EQ(t.busy_ns, 10'000'000);
  EXPECT_EQ(t.idle_ns, 1'000'000);
  EXPECT_EQ(t.marked_steps, 4);
}

// Whatever a device or its events throw, the consumer's loop never sees it.
TEST(GpuBusyTracker, NothingTheDeviceThrowsReachesTheLoop) {
  for (const bool in_harvest : {false, true}) {
    Timeline gpu;
    GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
    Step(tracker, 0, 0);
    Step(tracker, 0, 1);
    gpu.Complete(0, 0);
    gpu.Complete(1, 1);
    gpu.throw_on_query = true;
    if (in_harvest) {
      EXPECT_NO_THROW(HarvestAll(tracker));
      EXPECT_NO_THROW(tracker.EndStep());
    } else {
      EXPECT_NO_THROW(tracker.EndStep());
      EXPECT_NO_THROW(HarvestAll(tracker));
    }
    EXPECT_NO_THROW(tracker.MarkStart(tracker.BeginStep(0, 2), kStream));
    EXPECT_EQ(tracker.Totals().marked_steps, 2);  // measuring stopped
  }
}

// Steps on a stream capturing a CUDA graph are neither queried nor recorded on.
TEST(GpuBusyTracker, ACapturingStreamIsLeftAlone) {
  Timeline gpu;
  GpuBusyTracker tracker(std::make_shared<ScriptedDevice>(gpu));
  Step(tracker, 0, 0);
  gpu.capturing[kStream] = true;
  gpu.drained[kStream] = true;
  EXPECT_FALSE(tracker.EndStep());  // not queried: not counted as drained
  tracker.MarkStart(tracker.BeginStep(0, 1), kStream);
  EXPECT_FALSE(tracker.EndStep());
  EXPECT_EQ(gpu.entries.size(), 1u);
  EXPECT_EQ(gpu.queries, 0);
  EXPECT_EQ(tracker.Totals().drained_steps, 0);
  EXPECT_EQ(tracker.Totals().marked_steps, 1);
}

}  // namespace
}  // namespace gpufeed
