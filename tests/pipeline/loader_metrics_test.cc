#include "pipeline/measure/loader_metrics.h"

#include <gtest/gtest.h>

#include <chrono>

#include "core/clock.h"

namespace gpufeed {
namespace {

BatchTiming Built(int64_t batch, int64_t rows) {
  BatchTiming t;
  t.epoch = 3;
  t.batch = batch;
  t.rows = rows;
  t.read_ns = 100;
  t.transform_ns = 20;
  t.copy_ns = 7;
  t.buffer_wait_ns = 5;
  return t;
}

TEST(LoaderMetrics, WorkerStageTimesAddUp) {
  LoaderMetrics m(std::make_shared<GpuBusyTracker>(HostDevice()));
  m.AddWorkerTiming(Built(0, 8));
  m.AddWorkerTiming(Built(1, 8));
  const LoaderStats s = m.Stats();
  EXPECT_EQ(s.read_ns, 200);
  EXPECT_EQ(s.transform_ns, 40);
  EXPECT_EQ(s.copy_ns, 14);
  EXPECT_EQ(s.buffer_wait_ns, 10);
  EXPECT_EQ(s.batches, 0);  // built is not delivered
  EXPECT_EQ(s.gpu_steps, 0);
}

TEST(LoaderMetrics, ADeliveredBatchIsKeptOnceItsStepEnds) {
  LoaderMetrics m(std::make_shared<GpuBusyTracker>(HostDevice()));
  m.StartRun(SteadyNowNs());
  const int64_t ready = SteadyNowNs() - 2000;  // the batch was ready before Next() was called
  const int64_t called = ready + 1000;
  m.BeginNext(called);
  EXPECT_EQ(m.FinishPending(called, false), std::nullopt);  // nothing delivered yet
  m.Delivered(Built(4, 8), BatchStamps{}, called, ready, /*gpu_step=*/7, /*bytes=*/96,
              /*workers=*/2,
              /*prefetch=*/5);
  LoaderStats s = m.Stats();
  EXPECT_EQ(s.batches, 1);
  EXPECT_EQ(s.samples, 8);
  EXPECT_EQ(s.bytes, 96);
  EXPECT_EQ(s.queue_wait_ns, 1000);
  EXPECT_GT(s.first_batch_ns, 0);
  EXPECT_TRUE(m.Recent(10).empty());  // its step is not known yet

  const int64_t again = SteadyNowNs() + 5000;
  m.BeginNext(again);
  const auto finished = m.FinishPending(again, /*drained=*/true);
  ASSERT_TRUE(finished.has_value());
  const auto recent = m.Recent(10);
  ASSERT_EQ(recent.size(), 1u);
  const BatchTiming& t = recent[0];
  EXPECT_EQ(t.batch, 4);
  EXPECT_EQ(t.epoch, 3);
  EXPECT_EQ(t.read_ns, 100);
  EXPECT_EQ(t.queue_wait_ns, 1000);
  EXPECT_EQ(t.workers, 2);
  EXPECT_EQ(t.prefetch, 5);
  EXPECT_TRUE(t.gpu_drained);
  EXPECT_GE(t.consumer_wait_ns, 1000);  // from `called` to Delivered()
  EXPECT_GE(t.step_ns, 5000);
  EXPECT_EQ(t.gpu_busy_ns, -1);  // no stream was named
  EXPECT_EQ(finished->step_ns, t.step_ns);
  s = m.Stats();
  EXPECT_EQ(s.consumer_step_ns, t.step_ns);
  EXPECT_GE(s.wall_ns, 0);
}

TEST(LoaderMetrics, ARestartDropsThePendingBatchAndKeepsTheLast4096) {
  LoaderMetrics m(std::make_shared<GpuBusyTracker>(HostDevice()));
  m.StartRun(SteadyNowNs());
  const int64_t total = LoaderMetrics::kTimingsKept + 10;
  for (int64_t b = 0; b < total; ++b) {
    const int64_t called = SteadyNowNs();
    m.BeginNext(called);
    m.FinishPending(called, false);
    m.Delivered(Built(b, 1), BatchStamps{}, called, called, b, 4, 1, 1);
  }
  m.StartRun(SteadyNowNs());  // the last batch's step never ends
  const int64_t called = SteadyNowNs();
  EXPECT_EQ(m.FinishPending(called, false), std::nullopt);
  const auto recent = m.Recent(1 << 20);
  ASSERT_EQ(recent.size(), LoaderMetrics::kTimingsKept);
  EXPECT_EQ(recent.front().batch, total - 1 - static_cast<int64_t>(LoaderMetrics::kTimingsKept));
  EXPECT_EQ(recent.back().batch, total - 2);
  EXPECT_EQ(m.Recent(2).front().batch, total - 3);
  EXPECT_EQ(m.Stats().batches, total);
}

TEST(LoaderMetrics, TuningChangesAreLoggedInOrder) {
  LoaderMetrics m(std::make_shared<GpuBusyTracker>(HostDevice()));
  m.LogTuning("one");
  m.LogTuning("two");
  EXPECT_EQ(m.Stats().tuning_log, (std::vector<std::string>{"one", "two"}));
}

// The consumer waited from 100 to 1000: the batch was taken by a worker at 150, got its buffer
// at 200, was read until 600, transformed until 700, copied until 900, and handed over at 1000.
TEST(LoaderMetrics, TheWaitIsSplitByWhereTheBatchWas) {
  BatchStamps s;
  s.start_ns = 150;
  s.read_start_ns = 200;
  s.read_end_ns = 600;
  s.transform_end_ns = 700;
  s.copy_start_ns = 700;
  s.copy_end_ns = 900;
  BatchTiming t;
  AttributeWait(t, s, /*called_ns=*/100, /*ready_ns=*/900, /*returned_ns=*/1000);
  EXPECT_EQ(t.waited_queued_ns, 50);
  EXPECT_EQ(t.waited_buffer_ns, 50);
  EXPECT_EQ(t.waited_read_ns, 400);
  EXPECT_EQ(t.waited_transform_ns, 100);
  EXPECT_EQ(t.waited_copy_ns, 200);
  EXPECT_EQ(t.waited_handoff_ns, 100);

  // Called in the middle of the read: only what was left of it counts.
  AttributeWait(t, s, 500, 900, 950);
  EXPECT_EQ(t.waited_queued_ns, 0);
  EXPECT_EQ(t.waited_buffer_ns, 0);
  EXPECT_EQ(t.waited_read_ns, 100);
  EXPECT_EQ(t.waited_transform_ns, 100);
  EXPECT_EQ(t.waited_copy_ns, 200);
  EXPECT_EQ(t.waited_handoff_ns, 50);

  // Ready before the call: all of the wait is the hand-over.
  AttributeWait(t, s, 950, 900, 960);
  EXPECT_EQ(t.waited_read_ns + t.waited_copy_ns + t.waited_queued_ns, 0);
  EXPECT_EQ(t.waited_handoff_ns, 10);

  // The device tier's gather has no read: from its buffer straight to the copy.
  BatchStamps gather;
  gather.start_ns = 100;
  gather.copy_start_ns = 300;
  gather.copy_end_ns = 400;
  AttributeWait(t, gather, 0, 400, 500);
  EXPECT_EQ(t.waited_queued_ns, 100);
  EXPECT_EQ(t.waited_buffer_ns, 200);
  EXPECT_EQ(t.waited_read_ns + t.waited_transform_ns, 0);
  EXPECT_EQ(t.waited_copy_ns, 100);
  EXPECT_EQ(t.waited_handoff_ns, 100);

  // Waiting for a pinned staging buffer is waiting for earlier batches' copies.
  s.staging = true;
  AttributeWait(t, s, 100, 900, 1000);
  EXPECT_EQ(t.waited_buffer_ns, 0);
  EXPECT_EQ(t.waited_copy_ns, 200 + 50);
  EXPECT_EQ(t.waited_read_ns, 400);
}

}  // namespace
}  // namespace gpufeed
