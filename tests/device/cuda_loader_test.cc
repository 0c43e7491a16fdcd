// The loader on the CUDA device, driven through the fake driver with copies that complete
// late: batches arrive intact value by value, a pinned buffer reused too early is caught,
// the consumer never sees a batch before its copy, and every allocation comes back on OOM,
// on a failed copy and when the loader is dropped with copies in flight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <thread>

#include "device/cuda_device.h"
#include "device/pinned_host_pool.h"
#include "fake_cuda_fixture.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "pipeline/batch_layout.h"

namespace gpufeed::cuda {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 7;

// float32 values are distinct per (sample, element): a row from another batch never matches.
Schema TestSchema() { return ParseSchema("x:float32[6],label:int64[]"); }

// True when every element of every field is the value the synthetic source stores for the
// batch's sample indices. Reads device memory directly: the fake's is host memory.
bool IsIntact(const Batch& batch) {
  for (int f = 0; f < static_cast<int>(batch.schema().fields.size()); ++f) {
    const FieldView view = batch.field(f);
    const int64_t per_sample = view.spec->ElementsPerSample();
    for (int64_t r = 0; r < batch.size(); ++r) {
      const int64_t sample = batch.indices()[static_cast<size_t>(r)];
      for (int64_t e = 0; e < per_sample; ++e) {
        const int64_t i = r * per_sample + e;
        const double got = view.spec->dtype == DType::kFloat32
                               ? static_cast<double>(view.as<float>()[i])
                               : static_cast<double>(view.as<int64_t>()[i]);
        if (got != SyntheticValue(kSeed, f, sample, e, view.spec->dtype)) return false;
      }
    }
  }
  return true;
}

int PendingWrites(const Batch& batch) {
  int pending = 0;
  for (int f = 0; f < static_cast<int>(batch.schema().fields.size()); ++f) {
    const FieldView view = batch.field(f);
    pending += fake_cuda_pending_writes(view.data, view.bytes());
  }
  return pending;
}

class CudaLoaderTest : public testing::FakeCudaTest {
 protected:
  std::unique_ptr<Loader> MakeLoader(int64_t samples, int64_t batch_size, int workers,
                                     int prefetch = 0) {
    LoaderOptions options;
    options.batch_size = batch_size;
    options.shuffle = true;
    options.seed = 3;
    options.workers = workers;
    options.prefetch = prefetch;
    options.device = device_;
    return std::make_unique<Loader>(OpenSynthetic(TestSchema(), samples, kSeed), options);
  }

  void SetUp() override {
    FakeCudaTest::SetUp();
    device_ = OpenCudaDevice();
  }
  void TearDown() override {
    device_.reset();
    FakeCudaTest::TearDown();
  }

  std::shared_ptr<CudaDevice> device_;
};

TEST_F(CudaLoaderTest, TenThousandBatchesArriveIntactThroughDelayedCopies) {
  fake_cuda_set_copy_delay_us(50);
  constexpr int64_t kBatches = 10'000;
  auto loader = MakeLoader(kBatches * 4, 4, 3, 4);
  int64_t batches = 0, intact = 0, observed_early = 0;
  while (auto batch = loader->Next()) {
    batch->Synchronize();
    observed_early += PendingWrites(*batch) > 0;
    intact += IsIntact(*batch);
    ++batches;
  }
  EXPECT_EQ(batches, kBatches);
  EXPECT_EQ(intact, kBatches);
  EXPECT_EQ(observed_early, 0);
  EXPECT_EQ(fake_cuda_pageable_copies(), 0);  // every copy came from pinned memory
  // Two fields, one copy each; the workers may have started on the next epoch already.
  EXPECT_GE(device_->stats().copies, 2 * kBatches);
  const LoaderStats stats = loader->stats();
  EXPECT_EQ(stats.device, "cuda:0");
  EXPECT_EQ(stats.buffers, (3 + 4 + 3) + (3 + 2));  // device batches (workers + prefetch
                                                    // + max_outstanding) + pinned staging
}

TEST_F(CudaLoaderTest, PinnedBufferReusedBeforeItsCopyIsCaughtAsCorruptData) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the broken ordering is a data race by design; TSan would report it";
#endif
  // Events that claim completion at once: the staging pool hands a pinned buffer back
  // while its copy is still queued, the next batch is written into it, and the delayed copy
  // then carries the wrong rows.
  fake_cuda_set_events_lie(1);
  fake_cuda_set_copy_delay_us(2'000);
  auto loader = MakeLoader(200 * 4, 4, 3, 4);
  int64_t batches = 0, corrupt = 0;
  while (auto batch = loader->Next()) {
    fake_cuda_synchronize_all();  // Batch::Synchronize trusts the lying event
    corrupt += !IsIntact(*batch);
    ++batches;
  }
  EXPECT_EQ(batches, 200);
  EXPECT_GT(corrupt, 0) << "the value check must catch a pinned buffer reused too early";
  loader.reset();
  expected_failures_ = fake_cuda_failures();  // the broken ordering may trip the fake too
}

TEST_F(CudaLoaderTest, ConsumerStreamWaitsForTheCopyBeforeReadingTheBatch) {
  fake_cuda_set_copy_delay_us(20'000);
  const CudaDriver& driver = device_->driver();
  CUstream consumer = nullptr;
  {
    CurrentContextScope scope(*device_->context());
    ASSERT_EQ(driver.StreamCreate(&consumer, kStreamNonBlocking), kSuccess);
  }
  {
    auto loader = MakeLoader(16 * 8, 8, 2, 2);
    int unordered_first = -1;
    for (int i = 0; i < 16; ++i) {
      auto batch = loader->Next();
      ASSERT_TRUE(batch);
      const FieldView x = batch->field("x");
      if (i == 0) {
        // Control: a stream that did not wait runs while the copy is still queued.
        ASSERT_EQ(fake_cuda_stream_probe(nullptr, x.data, x.bytes(), &unordered_first), 0);
      }
      batch->WaitOn(reinterpret_cast<uintptr_t>(consumer));
      int ordered = -1;
      ASSERT_EQ(fake_cuda_stream_probe(consumer, x.data, x.bytes(), &ordered), 0);
      ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
      EXPECT_EQ(ordered, 0) << "batch " << i << " read on the consumer stream before its copy";
      EXPECT_TRUE(IsIntact(*batch));
      // Dropped here: its device buffer is reused only after an event on the consumer stream.
    }
    driver.StreamSynchronize(nullptr);
    EXPECT_GT(unordered_first, 0);
  }
  CurrentContextScope scope(*device_->context());
  EXPECT_EQ(driver.StreamDestroy(consumer), kSuccess);
}

// A training step on the consumer's stream: wait for the batch, a 10 ms "kernel", then the
// host waits for it (loss.item()), as most loops do once a step.
TEST_F(CudaLoaderTest, EventsOnTheConsumerStreamMeasureTheGpuBusyShareOfEachStep) {
  const CudaDriver& driver = device_->driver();
  CUstream consumer = nullptr;
  {
    CurrentContextScope scope(*device_->context());
    ASSERT_EQ(driver.StreamCreate(&consumer, kStreamNonBlocking), kSuccess);
  }
  {
    auto loader = MakeLoader(64 * 8, 8, 2, 2);
    constexpr int kSteps = 30;
    // stats() and RecentBatches() may be called from any thread: they harvest events too.
    std::atomic<bool> done{false};
    std::thread watcher([&] {
      while (!done.load()) {
        loader->stats();
        loader->RecentBatches(8);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    struct StopWatcher {  // joins it on every way out, a failed ASSERT included
      std::atomic<bool>& done;
      std::thread& watcher;
      ~StopWatcher() {
        done = true;
        if (watcher.joinable()) watcher.join();
      }
    } stop_watcher{done, watcher};
    for (int i = 0; i < kSteps; ++i) {
      auto batch = loader->Next();
      ASSERT_TRUE(batch);
      batch->WaitOn(reinterpret_cast<uintptr_t>(consumer));
      ASSERT_EQ(fake_cuda_stream_sleep(consumer, 10'000), 0);
      ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
    }
    done = true;
    watcher.join();
    ASSERT_TRUE(loader->Next());  // ends the last step
    ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
    const LoaderStats stats = loader->stats();
    EXPECT_GE(stats.gpu_steps, kSteps - 2);
    EXPECT_GT(stats.GpuBusyFraction(), 0.9) << stats.ToJson();
    EXPECT_GE(stats.gpu_busy_ns, (kSteps - 2) * int64_t{10'000'000});
    EXPECT_GE(stats.gpu_drained_steps, kSteps - 1);  // synchronized every step
    EXPECT_THAT(stats.ToJson(), HasSubstr("\"gpu_event_steps\":"));
    int measured = 0;
    for (const BatchTiming& t : loader->RecentBatches(kSteps)) {
      if (t.gpu_busy_ns < 0) continue;
      ++measured;
      EXPECT_GE(t.gpu_busy_ns, 10'000'000);
      EXPECT_GE(t.gpu_idle_ns, t.batch == 0 ? -1 : 0);
    }
    EXPECT_GE(measured, kSteps - 1);
  }
  CurrentContextScope scope(*device_->context());
  EXPECT_EQ(driver.StreamDestroy(consumer), kSuccess);
}

// SetEpoch back to an epoch already run (a validation pass in between): the step open at the
// restart is dropped, not stretched over the pause, and the rerun batches keep their own
// figures instead of taking over the first run's (same epoch and batch numbers).
TEST_F(CudaLoaderTest, ARestartDropsTheOpenStepAndRerunBatchesKeepTheirOwnFigures) {
  const CudaDriver& driver = device_->driver();
  CUstream consumer = nullptr;
  {
    CurrentContextScope scope(*device_->context());
    ASSERT_EQ(driver.StreamCreate(&consumer, kStreamNonBlocking), kSuccess);
  }
  {
    auto loader = MakeLoader(64 * 8, 8, 2, 2);
    constexpr int kSteps = 4;
    const auto run = [&](unsigned step_us) {
      for (int i = 0; i < kSteps; ++i) {
        auto batch = loader->Next();
        ASSERT_TRUE(batch);
        batch->WaitOn(reinterpret_cast<uintptr_t>(consumer));
        ASSERT_EQ(fake_cuda_stream_sleep(consumer, step_us), 0);
        ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
      }
    };
    run(5'000);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // "validation"
    loader->SetEpoch(0);  // batch 4 of epoch 0 is next: a restart at batch 0
    run(30'000);
    ASSERT_TRUE(loader->Next());  // ends the last step
    ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
    // The step open at the restart (batch 3 of the first run) keeps no timing.
    const std::vector<BatchTiming> timings = loader->RecentBatches(2 * kSteps);
    ASSERT_EQ(timings.size(), 2u * kSteps - 1);
    int measured_first = 0;
    int measured_second = 0;
    int64_t busy_in_timings = 0;
    for (int i = 0; i < 2 * kSteps - 1; ++i) {
      const BatchTiming& t = timings[static_cast<size_t>(i)];
      const bool first_run = i < kSteps - 1;
      EXPECT_EQ(t.batch, first_run ? i : i - (kSteps - 1));
      EXPECT_LT(t.gpu_idle_ns, 80'000'000) << "step " << i << " idle spans the pause";
      if (t.gpu_busy_ns < 0) continue;
      busy_in_timings += t.gpu_busy_ns;
      if (first_run) {
        ++measured_first;
        EXPECT_LT(t.gpu_busy_ns, 25'000'000) << "step " << i << " has the rerun's figure";
      } else {
        ++measured_second;
        EXPECT_GE(t.gpu_busy_ns, 30'000'000) << "step " << i;
      }
    }
    // Every step in the totals is one of those timings: none spans the pause.
    EXPECT_LE(loader->stats().gpu_busy_ns, busy_in_timings) << loader->stats().ToJson();
    EXPECT_GE(measured_first, kSteps - 2);
    EXPECT_GE(measured_second, kSteps - 1);
  }
  CurrentContextScope scope(*device_->context());
  EXPECT_EQ(driver.StreamDestroy(consumer), kSuccess);
}

// A loop that captures a CUDA graph on its stream for a few steps: the loader neither queries
// the stream nor records timing events on it then (either would break the capture; the fake
// counts both as failures), and measures again once the capture is over.
TEST_F(CudaLoaderTest, StepsOnACapturingStreamAreLeftUnmeasured) {
  const CudaDriver& driver = device_->driver();
  ASSERT_NE(driver.StreamIsCapturing, nullptr);
  CUstream consumer = nullptr;
  {
    CurrentContextScope scope(*device_->context());
    ASSERT_EQ(driver.StreamCreate(&consumer, kStreamNonBlocking), kSuccess);
  }
  {
    auto loader = MakeLoader(64 * 8, 8, 2, 2);
    for (int i = 0; i < 12; ++i) {
      const bool capturing = i >= 3 && i < 7;
      ASSERT_EQ(fake_cuda_set_capturing(consumer, capturing ? 1 : 0), 0);
      auto batch = loader->Next();
      ASSERT_TRUE(batch);
      batch->WaitOn(reinterpret_cast<uintptr_t>(consumer));
      ASSERT_EQ(fake_cuda_stream_sleep(consumer, 2'000), 0);
      if (!capturing) {
        ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
      }
    }
    ASSERT_EQ(fake_cuda_set_capturing(consumer, 0), 0);
    ASSERT_TRUE(loader->Next());
    ASSERT_EQ(driver.StreamSynchronize(consumer), kSuccess);
    EXPECT_EQ(fake_cuda_failures(), 0) << testing::FakeFailures();
    const std::vector<BatchTiming> timings = loader->RecentBatches(12);
    ASSERT_EQ(timings.size(), 12u);
    for (int i = 3; i < 7; ++i) {
      EXPECT_EQ(timings[static_cast<size_t>(i)].gpu_busy_ns, -1) << "step " << i;
    }
    for (int i = 8; i < 12; ++i) {  // step 7's start came after a step without an end
      EXPECT_GE(timings[static_cast<size_t>(i)].gpu_busy_ns, 2'000'000) << "step " << i;
      EXPECT_GE(timings[static_cast<size_t>(i)].gpu_idle_ns, 0) << "step " << i;
    }
  }
  CurrentContextScope scope(*device_->context());
  EXPECT_EQ(driver.StreamDestroy(consumer), kSuccess);
}

TEST_F(CudaLoaderTest, AConsumerThatNamesNoStreamGetsNoEventFigures) {
  auto loader = MakeLoader(64 * 8, 8, 2, 2);
  for (int i = 0; i < 20; ++i) {
    auto batch = loader->Next();
    ASSERT_TRUE(batch);
    batch->Synchronize();
  }
  loader->Next();
  fake_cuda_synchronize_all();
  const LoaderStats stats = loader->stats();
  EXPECT_EQ(stats.gpu_steps, 0);
  EXPECT_EQ(stats.gpu_busy_ns, 0);
  EXPECT_EQ(stats.gpu_drained_steps, 0);
  EXPECT_LT(stats.GpuBusyFraction(), 0);
  EXPECT_THAT(stats.ToJson(), HasSubstr("\"gpu_busy_fraction\":null"));
  for (const BatchTiming& t : loader->RecentBatches(20)) {
    EXPECT_EQ(t.gpu_busy_ns, -1);
    EXPECT_EQ(t.gpu_idle_ns, -1);
    EXPECT_FALSE(t.gpu_drained);
  }
}

TEST_F(CudaLoaderTest, OutOfDeviceMemoryNamesBytesAndFreeMemoryAndLeaksNothing) {
  const size_t buffer = BatchLayout(TestSchema(), {}, 64).buffer_bytes();
  const auto expect_oom = [&](const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr(std::to_string(buffer) + " byte"),
                      HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"), HasSubstr("1000 bytes (0.0 MiB) of")));
  };
  {
    SCOPED_TRACE("the working set (workers + prefetch = 4 buffers) is allocated up front");
    fake_cuda_set_device_memory(3 * buffer + 1000);
    try {
      auto loader = MakeLoader(64 * 100, 64, 2, 2);
      FAIL() << "the fourth device buffer cannot fit";
    } catch (const Error& e) {
      expect_oom(e);
    }
    EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  }
  {
    SCOPED_TRACE("a buffer needed later, while the consumer holds batches");
    fake_cuda_set_device_memory(4 * buffer + 1000);
    auto loader = MakeLoader(64 * 100, 64, 2, 2);
    // Let the workers run ahead: the batches they hold ready need a fifth buffer.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    try {
      std::deque<std::unique_ptr<Batch>> held;  // the consumer keeps max_outstanding
      for (int i = 0; i < 100; ++i) {
        if (held.size() == 2) held.pop_front();
        held.push_back(loader->Next());
      }
      FAIL() << "the fifth device buffer cannot fit";
    } catch (const Error& e) {
      expect_oom(e);
    }
  }
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

TEST_F(CudaLoaderTest, FailedCopiesSurfaceAsDeviceErrorsAndLeakNothing) {
  for (const bool asynchronous : {false, true}) {
    SCOPED_TRACE(asynchronous ? "failing when the stream runs it" : "failing at the call");
    fake_cuda_fail_copy(9, 700, asynchronous);
    auto loader = MakeLoader(64 * 50, 64, 2, 2);
    try {
      for (int i = 0; i < 50; ++i) {
        auto batch = loader->Next();
        batch->Synchronize();
      }
      FAIL() << "the ninth copy fails";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDevice);
      EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
    }
    loader.reset();
    EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  }
}

TEST_F(CudaLoaderTest, DroppingTheLoaderWithCopiesInFlightReleasesEverything) {
  fake_cuda_set_copy_delay_us(20'000);
  auto loader = MakeLoader(32 * 200, 32, 3, 6);
  auto held = loader->Next();
  ASSERT_TRUE(held);
  // Copies are queued behind one another on the fake's stream: most have not run yet.
  EXPECT_LT(fake_cuda_copies_completed(), device_->stats().copies);
  auto drop = std::async(std::launch::async, [&] {
    loader.reset();
    held.reset();
    device_.reset();
  });
  ASSERT_EQ(drop.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "dropping the loader hung";
  drop.get();
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  EXPECT_EQ(fake_cuda_live_streams(), 0);
  EXPECT_EQ(fake_cuda_live_events(), 0);
  EXPECT_EQ(fake_cuda_primary_ctx_refs(0), 0);
}

TEST_F(CudaLoaderTest, BatchOutlivesItsLoaderAndStaysReadable) {
  fake_cuda_set_copy_delay_us(5'000);
  auto loader = MakeLoader(8 * 10, 8, 2, 2);
  auto batch = loader->Next();
  loader.reset();
  batch->Synchronize();
  EXPECT_EQ(PendingWrites(*batch), 0);
  EXPECT_TRUE(IsIntact(*batch));
  EXPECT_GT(fake_cuda_outstanding_allocations(), 0);  // the batch's pool lives on with it
  batch.reset();
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

TEST_F(CudaLoaderTest, ALaterLoaderTakesThePinnedBuffersAnEarlierOneLeft) {
  PinnedHostPool& pool = PinnedHostPool::Instance();
  pool.SetRetainBytes(uint64_t{1} << 30);
  const PinnedHostPool::Counters before = pool.counters();
  const int64_t pinned = [&] {
    auto first = MakeLoader(8 * 10, 8, 2, 2);
    while (auto batch = first->Next()) {
      batch->Synchronize();
      EXPECT_TRUE(IsIntact(*batch));
    }
    return pool.counters().taken_fresh - before.taken_fresh;
  }();
  ASSERT_GT(pinned, 0);
  EXPECT_EQ(pool.counters().freed, before.freed);  // kept pinned
  {
    auto second = MakeLoader(8 * 10, 8, 2, 2);
    int64_t intact = 0;
    while (auto batch = second->Next()) {
      batch->Synchronize();
      intact += IsIntact(*batch);
    }
    EXPECT_EQ(intact, 10);  // built in buffers the first loader wrote
  }
  EXPECT_EQ(pool.counters().taken_fresh - before.taken_fresh, pinned);
  EXPECT_EQ(pool.counters().taken_kept - before.taken_kept, pinned);
  pool.SetRetainBytes(0);  // over budget: unpinned at once
  EXPECT_EQ(pool.counters().kept_bytes, 0);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

}  // namespace
}  // namespace gpufeed::cuda
