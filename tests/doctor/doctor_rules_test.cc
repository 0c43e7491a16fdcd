// Each rule of the doctor on recorded figures: no threads, no clock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/doctor.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// `n` identical batches: wait, step, read, transform, copy in milliseconds.
DoctorInput Recorded(double wait, double step, double read, double transform = 0, double copy = 0,
                     int n = 32) {
  DoctorInput in;
  BatchTiming t;
  t.rows = 8192;
  t.consumer_wait_ns = static_cast<int64_t>(wait * 1e6);
  t.step_ns = static_cast<int64_t>(step * 1e6);
  t.read_ns = static_cast<int64_t>(read * 1e6);
  t.transform_ns = static_cast<int64_t>(transform * 1e6);
  t.copy_ns = static_cast<int64_t>(copy * 1e6);
  in.batches.assign(static_cast<size_t>(n), t);
  in.workers = 2;
  in.prefetch = 4;
  in.max_workers = 2;
  in.batch_size = 8192;
  in.sample_bytes = 8200;
  in.dataset_samples = 100000;
  in.cpu_count = 2;
  in.ram_available_bytes = uint64_t{20} << 30;
  in.ram_total_bytes = uint64_t{24} << 30;
  in.min_seconds = 0;  // the figures stand for a long enough run
  return in;
}

TEST(DoctorRules, CpuSaturatedReadSuggestsTheRamCacheWithTheNumbers) {
  DoctorInput in = Recorded(30, 10, 78);
  in.process_cpu_cores = 1.98;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "read");
  EXPECT_THAT(d.headline, HasSubstr("CPU-saturated"));
  EXPECT_THAT(d.headline, HasSubstr("the CPU is at 198% of 2 cores"));
  EXPECT_NEAR(d.consumer_wait_fraction, 0.75, 1e-9);
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0], HasSubstr("the decoded set (0.8 GB) fits the RAM budget"));
  EXPECT_THAT(d.advice[0], HasSubstr("cache='ram'"));
}

TEST(DoctorRules, IdleCpuWithSpareCoresSaysRaiseWorkers) {
  DoctorInput in = Recorded(30, 10, 70);
  in.workers = 1;
  in.cpu_count = 8;
  in.process_cpu_cores = 0.9;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0], HasSubstr("raise workers from 1 to 8"));
}

TEST(DoctorRules, BusyWorkersWithAnIdleCpuAreIoBound) {
  DoctorInput in = Recorded(30, 10, 76);
  in.process_cpu_cores = 0.3;
  in.disk_read_bytes_per_second = 180e6;
  in.delivered_bytes = 4'000'000'000;
  in.storage_read_bytes = 3'900'000'000;  // the bytes came from a device
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_THAT(d.headline, HasSubstr("I/O-bound"));
  EXPECT_THAT(d.evidence.back(), HasSubstr("180 MB/s"));
  EXPECT_THAT(d.advice.back(), HasSubstr("faster storage"));
}

// Without the process's I/O counters the doctor cannot tell storage from memory: it says so,
// and never advises faster storage on no evidence.
TEST(DoctorRules, ReadsOfUnknownOriginAreNotBlamedOnStorage) {
  DoctorInput in = Recorded(30, 10, 76);
  in.process_cpu_cores = 0.3;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "read");
  EXPECT_THAT(d.headline, Not(HasSubstr("I/O-bound")));
  EXPECT_THAT(d.headline, HasSubstr("is unknown"));
  for (const auto& a : d.advice) EXPECT_THAT(a, Not(HasSubstr("faster storage")));
}

// Too little measured: what was seen, and no verdict.
TEST(DoctorRules, TooFewBatchesOrTooShortARunGiveNoVerdict) {
  DoctorInput in = Recorded(30, 10, 76, 0, 0, /*n=*/8);
  in.min_seconds = 1.0;
  Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kMeasuring);
  EXPECT_THAT(d.headline, HasSubstr("8 batch(es) over 0.32 s"));
  EXPECT_THAT(d.headline, HasSubstr("needs at least 16 batches and 1.0 s"));
  EXPECT_EQ(d.stage, Stage::kNone);

  in = Recorded(3, 10, 5, 0, 0, /*n=*/40);  // 40 batches, but 0.52 s
  in.min_seconds = 1.0;
  EXPECT_EQ(Diagnose(in).verdict, Verdict::kMeasuring);
  in = Recorded(3, 30, 5, 0, 0, /*n=*/40);  // 1.32 s
  in.min_seconds = 1.0;
  EXPECT_EQ(Diagnose(in).verdict, Verdict::kHealthy);
  EXPECT_EQ(Diagnose(DoctorInput{}).verdict, Verdict::kMeasuring);
}

// Batches read before the window (prefetched at start-up) against a loop of a fraction of a
// millisecond: the workers' busy share stays a share.
TEST(DoctorRules, WorkerBusyShareNeverExceedsOne) {
  DoctorInput in = Recorded(/*wait=*/0.01, /*step=*/0.2, /*read=*/92, 0, 0, /*n=*/1);
  in.min_seconds = 1.0;
  Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kMeasuring);
  EXPECT_DOUBLE_EQ(d.worker_busy_fraction, 1.0);
  EXPECT_THAT(d.ToText(), HasSubstr("workers 100% busy"));
  EXPECT_DOUBLE_EQ(Diagnose(Recorded(30, 10, 40)).worker_busy_fraction, 0.5);
}

// The stage named is the one the loop's wait was spent on, even where another stage takes
// the workers longer in total.
TEST(DoctorRules, TheStageIsTheOneTheWaitWasSpentOn) {
  DoctorInput in = Recorded(30, 10, /*read=*/60, /*transform=*/20);
  for (BatchTiming& b : in.batches) {
    b.waited_read_ns = 5'000'000;
    b.waited_transform_ns = 25'000'000;
  }
  Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "transform") << d.ToText();
  ASSERT_EQ(d.wait_path.size(), 6u);
  EXPECT_EQ(d.wait_path[3].first, "transform");
  EXPECT_NEAR(d.wait_path[3].second, 25.0 / 30.0, 1e-9);
  EXPECT_THAT(d.ToText(), HasSubstr("being read 17%, transformed 83%"));
  // Every wait before a worker took the batch (all workers busy): the stage the workers
  // spend their time in.
  for (BatchTiming& b : in.batches) {
    b.waited_read_ns = b.waited_transform_ns = 0;
    b.waited_queued_ns = 30'000'000;
  }
  d = Diagnose(in);
  EXPECT_EQ(StageName(d.stage), "read") << d.ToText();
}

// The loop's wait spent with its batch already ready is the loop not running to take it, not
// a stage of the loader: with the GPU idle that is host-bound, never input-bound on read (the
// host-bound scenario beside a CPU burner read 12% of hand-over wait as "input-bound").
TEST(DoctorRules, AWaitSpentWithTheBatchReadyIsNoStageOfTheLoader) {
  DoctorInput in = Recorded(3, 22, /*read=*/0.01);
  for (BatchTiming& b : in.batches) b.waited_handoff_ns = 3'000'000;
  in.gpu_utilization = 0.15;
  Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHostBound) << d.ToText();
  EXPECT_EQ(d.stage, Stage::kNone);
  // The same wait spent on reads is input-bound on read.
  for (BatchTiming& b : in.batches) {
    b.waited_handoff_ns = 0;
    b.waited_read_ns = 3'000'000;
  }
  d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound) << d.ToText();
  EXPECT_EQ(StageName(d.stage), "read");
}

// The loop waits while the loader's threads sit runnable without a CPU: starved, with the
// figures and who takes the cores; below half of the wait, the stage verdict stands.
TEST(DoctorRules, RunnableThreadsWithoutACpuAreCpuStarved) {
  DoctorInput in = Recorded(30, 10, /*read=*/40);
  for (BatchTiming& b : in.batches) {
    b.waited_read_ns = 30'000'000;
    b.consumer_runqueue_ns = 2'000'000;
    b.worker_runqueue_ns = 24'000'000;  // of a 40 ms read, 30 ms of which the loop waited on
  }
  in.process_cpu_cores = 0.4;
  in.top_cpu_processes = {"pid 4242 cc1plus: 0.98 cores", "pid 4243 ld: 0.60 cores"};
  Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kCpuStarved) << d.ToText();
  EXPECT_EQ(StageName(d.stage), "read");
  // 2 ms + 24 ms x 30/40 = 20 ms of the 30 ms wait.
  EXPECT_NEAR(d.starved_fraction, 20.0 / 30.0, 1e-9);
  EXPECT_THAT(d.headline, HasSubstr("for 67% of that wait the loader's threads were runnable"));
  EXPECT_THAT(d.headline, HasSubstr("20.0 ms per batch"));
  EXPECT_THAT(d.headline, HasSubstr("pid 4242 cc1plus: 0.98 cores"));
  EXPECT_THAT(d.ToJson(), HasSubstr("\"verdict\":\"cpu-starved\""));

  // The process's own threads take the cores: say so, and what to cut.
  in.process_cpu_cores = 1.95;
  d = Diagnose(in);
  EXPECT_THAT(d.headline, HasSubstr("this process's own threads use 1.95 of 2 usable cores"));
  EXPECT_THAT(d.advice[0], HasSubstr("torch.set_num_threads"));

  for (BatchTiming& b : in.batches) b.worker_runqueue_ns = 4'000'000;  // 5 ms of 30
  d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound) << d.ToText();
  EXPECT_EQ(StageName(d.stage), "read");
}

TEST(DoctorRules, SlowTransformsAreNamed) {
  DoctorInput in = Recorded(20, 10, 10, 50);
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "transform");
  EXPECT_THAT(d.advice[0], HasSubstr("on the GPU"));
}

TEST(DoctorRules, CopyDominatingADataWaitIsCopyBound) {
  DoctorInput in = Recorded(20, 10, 8, 0, 40);
  in.device_copy = true;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kCopyBound);
  EXPECT_EQ(StageName(d.stage), "copy");
  EXPECT_THAT(d.advice[0], HasSubstr("float16"));
}

TEST(DoctorRules, CopyBoundOnTheDeviceCacheAdvisesACastBeforeTheUploadNotTheDeviceTier) {
  DoctorInput in = Recorded(20, 10, 8, 0, 40);
  in.device_copy = true;
  in.cache = CacheTier::kDevice;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kCopyBound);
  ASSERT_EQ(d.advice.size(), 1u);
  EXPECT_THAT(d.advice[0], HasSubstr("CacheOptions::transforms"));
  for (const auto& a : d.advice) EXPECT_THAT(a, Not(HasSubstr("cache='device'")));
}

TEST(DoctorRules, IdleGpuWithoutDataWaitIsHostBoundAndSuggestsABatch) {
  DoctorInput in = Recorded(0.1, 10, 5);
  in.gpu_utilization = 0.2;
  in.batch_size = 128;
  in.vram_used_bytes = uint64_t{4500} << 20;
  in.vram_total_bytes = uint64_t{24} << 30;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHostBound);
  EXPECT_THAT(d.headline, HasSubstr("GPU was busy 20%"));
  EXPECT_THAT(d.advice.back(), HasSubstr("batch 128 uses 4.7 GB of 25.8 GB VRAM"));
  // One reading cannot tell the memory that grows with the batch from the rest: no size is
  // guessed, the measuring helper is named.
  EXPECT_THAT(d.advice.back(), HasSubstr("gpufeed.suggest_batch_size(step, loader)"));
  EXPECT_THAT(d.advice.back(), Not(HasSubstr("fits (")));
}

TEST(DoctorRules, BusyGpuWithoutDataWaitIsHealthy) {
  DoctorInput in = Recorded(0.1, 10, 5);
  in.gpu_utilization = 0.93;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHealthy);
  EXPECT_THAT(d.headline, HasSubstr("busy 93%"));
  EXPECT_FALSE(Diagnose(Recorded(0.1, 10, 5)).headline.empty());  // no GPU reading: healthy
}

TEST(DoctorRules, MemoryPressureComesFirst) {
  DoctorInput in = Recorded(30, 10, 70);
  in.cgroup_memory_limit_bytes = uint64_t{8} << 30;
  in.cgroup_memory_used_bytes = uint64_t{8} << 30;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kMemoryPressure);
  EXPECT_THAT(d.advice[0], HasSubstr("lower prefetch from 4 to 1"));
}

TEST(DoctorRules, NothingMeasuredIsSaidPlainly) {
  EXPECT_THAT(Diagnose(DoctorInput{}).headline, HasSubstr("nothing measured yet"));
  const std::string json = Diagnose(Recorded(30, 10, 70)).ToJson();
  EXPECT_THAT(json, HasSubstr("\"verdict\":\"input-bound\""));
}

}  // namespace
}  // namespace gpufeed

namespace gpufeed {
namespace {

// The same busy reads, but the process fetched almost nothing from storage for what it
// delivered: the page cache served them, so the workers copy memory. Never "faster storage".
TEST(DoctorRules, ReadsServedByThePageCacheAreMemoryBoundNotStorage) {
  DoctorInput in = Recorded(30, 10, 76);
  in.process_cpu_cores = 0.3;
  in.device_copy = true;
  in.delivered_bytes = uint64_t{2460} * 1000 * 1000;
  in.storage_read_bytes = 12 * 1000 * 1000;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "read");
  EXPECT_THAT(d.headline, HasSubstr("memory-bound"));
  EXPECT_THAT(d.headline, HasSubstr("fetched only 0.0 GB from storage for 2.5 GB delivered"));
  EXPECT_THAT(d.headline, Not(HasSubstr("wait on storage")));
  for (const std::string& advice : d.advice) {
    EXPECT_THAT(advice, Not(HasSubstr("faster storage"))) << advice;
  }
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0], HasSubstr("cache='device'"));
  // A tenth or more of the delivered bytes from a device: that is storage.
  in.storage_read_bytes = in.delivered_bytes / 5;
  const Diagnosis io = Diagnose(in);
  EXPECT_THAT(io.headline, HasSubstr("I/O-bound"));
  EXPECT_THAT(io.headline, HasSubstr("fetched 0.5 GB from storage for 2.5 GB delivered"));
}

TEST(DoctorRules, BlockShuffleAdviceOnlyForSourcesThatStoreSamplesTogether) {
  DoctorInput in = Recorded(30, 10, 78);
  in.process_cpu_cores = 1.98;
  const auto mentions_block_shuffle = [](const Diagnosis& d) {
    for (const std::string& advice : d.advice) {
      if (advice.find("block shuffle") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_FALSE(mentions_block_shuffle(Diagnose(in)));  // a NumPy folder: any order reads alike
  in.source_block = 256;
  EXPECT_TRUE(mentions_block_shuffle(Diagnose(in)));
  in.block_shuffle = true;  // already on
  EXPECT_FALSE(mentions_block_shuffle(Diagnose(in)));
}

TEST(DoctorRules, ASampleCutIntoManyChunkPiecesGetsLayoutAdviceFirst) {
  DoctorInput in = Recorded(30, 10, 76);
  in.process_cpu_cores = 1.98;
  in.source_pieces_per_sample = 256;
  in.pieces_field = "mel";
  in.pieces_chunk_shape = {3125, 1, 4, 2};
  in.pieces_sample_shape = {1, 64, 32};
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0], HasSubstr("each sample of 'mel' spans 256 chunks"));
  EXPECT_THAT(d.advice[0], HasSubstr("chunks=(3125, 1, 64, 32)"));
  EXPECT_THAT(d.advice[0], HasSubstr("gpufeed rechunk IN.h5 OUT.h5"));
  // Whole samples, or a cache that stores whole rows: no layout advice.
  in.source_pieces_per_sample = 1;
  for (const auto& a : Diagnose(in).advice) EXPECT_THAT(a, Not(HasSubstr("spans")));
  in.source_pieces_per_sample = 256;
  in.cache = CacheTier::kRam;
  for (const auto& a : Diagnose(in).advice) EXPECT_THAT(a, Not(HasSubstr("spans")));
}

TEST(DoctorRules, AMachineBusyWithOtherProcessesIsCpuSaturatedNotIoBound) {
  DoctorInput in = Recorded(30, 10, 76);
  in.process_cpu_cores = 0.3;
  in.machine_cpu_ratio = 1.0;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_THAT(d.headline, HasSubstr("CPU-saturated"));
  EXPECT_THAT(d.headline, HasSubstr("other processes"));
}

}  // namespace
}  // namespace gpufeed

// The GPU measured by events on the training stream (BatchTiming::gpu_busy_ns/gpu_idle_ns).
namespace gpufeed {
namespace {

using ::testing::HasSubstr;

DoctorInput WithEvents(DoctorInput in, double busy_ms, double idle_ms, int drained = 0) {
  int i = 0;
  for (BatchTiming& t : in.batches) {
    t.gpu_busy_ns = static_cast<int64_t>(busy_ms * 1e6);
    t.gpu_idle_ns = static_cast<int64_t>(idle_ms * 1e6);
    t.gpu_drained = i++ < drained;
  }
  // What CollectDoctorInput derives from the same batches.
  in.gpu_event_steps = static_cast<int64_t>(in.batches.size());
  in.gpu_busy_events = busy_ms / (busy_ms + idle_ms);
  in.gpu_drained_steps = drained;
  in.device_copy = true;
  return in;
}

TEST(DoctorRules, EventsArePreferredOverNvmlAndTheTextSaysSo) {
  DoctorInput in = WithEvents(Recorded(0.1, 10, 5), 9.8, 0.2);
  in.gpu_utilization = 0.6;  // NVML's coarse "a kernel ran" reading
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHealthy);
  EXPECT_EQ(d.gpu_measure, "events");
  EXPECT_NEAR(d.gpu_busy_fraction, 0.98, 1e-9);
  EXPECT_THAT(d.headline, HasSubstr("busy 98% (measured by events on the training stream over "
                                    "32 steps)"));
  EXPECT_THAT(d.ToJson(), HasSubstr("\"gpu_measure\":\"events\""));
}

TEST(DoctorRules, WithoutEventsTheTextNamesNvml) {
  DoctorInput in = Recorded(0.1, 10, 5);
  in.gpu_utilization = 0.93;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.gpu_measure, "NVML");
  EXPECT_THAT(d.headline, HasSubstr("(NVML utilization)"));
  EXPECT_THAT(Diagnose(Recorded(0.1, 10, 5)).ToJson(), HasSubstr("\"gpu_busy_fraction\":null"));
}

TEST(DoctorRules, GpuWaitingForBatchesTheLoopAlreadyHasIsCopyBound) {
  // The loop never waits in Next(), yet the GPU waits 40% of its time: the copies are late.
  DoctorInput in = WithEvents(Recorded(0.1, 10, 5), 6, 4);
  in.gpu_utilization = 0.9;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kCopyBound) << d.ToText();
  EXPECT_EQ(StageName(d.stage), "copy");
  EXPECT_THAT(d.headline, HasSubstr("the GPU waited 40% of its time"));
  EXPECT_THAT(d.headline, HasSubstr("events on the training stream"));
}

TEST(DoctorRules, TheGpuWaitingWhileTheLoopWaitsInNextIsNoCopyLag) {
  // The GPU waits 1.5 ms a step (14%), 0.9 ms of it while the loop itself waits in Next()
  // (9%, under the input-bound line): 0.6 ms (6%) is left for the copy, too little to blame.
  DoctorInput in = WithEvents(Recorded(0.9, 9, 5), 9, 1.5);
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHealthy) << d.ToText();
  EXPECT_THAT(d.headline, HasSubstr("busy 86% (measured by events"));
}

TEST(DoctorRules, InputBoundVerdictSaysWhatTheEventsMeasured) {
  DoctorInput in = WithEvents(Recorded(30, 10, 78), 10, 30);
  in.process_cpu_cores = 1.98;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "read");
  EXPECT_THAT(d.headline, HasSubstr("the GPU waited 75% of its time for the next batch "
                                    "(measured by events on the training stream over 32 "
                                    "steps)"));
}

TEST(DoctorRules, NoDataWaitOnTheEventsButAnIdleNvmlIsHostBound) {
  // Events rule the data out; the GPU idles inside the steps, which only NVML sees, and the
  // stream had run dry at every Next().
  DoctorInput in = WithEvents(Recorded(0.1, 10, 5), 9.9, 0.1, 32);
  in.gpu_utilization = 0.15;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHostBound) << d.ToText();
  EXPECT_THAT(d.headline, HasSubstr("ran kernels only 15% of the time (NVML utilization)"));
  bool drained = false;
  for (const auto& e : d.evidence) {
    drained |= e.find("in 32 of 32 steps the stream had run out") != std::string::npos;
  }
  EXPECT_TRUE(drained) << d.ToText();
}

TEST(DoctorRules, EventsOverTooFewStepsGiveWayToNvmlAndTheTextSaysSo) {
  DoctorInput in = WithEvents(Recorded(0.1, 10, 5), 2, 8);  // one step's events: 20% busy
  in.gpu_event_steps = 1;
  in.gpu_utilization = 0.93;
  const Diagnosis d = Diagnose(in);
  EXPECT_EQ(d.verdict, Verdict::kHealthy) << d.ToText();
  EXPECT_EQ(d.gpu_measure, "NVML");
  EXPECT_NEAR(d.gpu_busy_fraction, 0.93, 1e-9);
  bool said = false;
  for (const auto& e : d.evidence) {
    said |= e.find("timed only 1 of 32 steps (at least 16 needed)") != std::string::npos;
  }
  EXPECT_TRUE(said) << d.ToText();
}

TEST(DoctorRules, ALowEventShareIsNeverHostBound) {
  // The GPU waited 70% of its time for batches: events count a wait for the host as busy, so
  // this is no host-side bottleneck, whatever else it is.
  DoctorInput in = WithEvents(Recorded(0.1, 10, 5), 3, 7);
  in.device_copy = false;
  const Diagnosis d = Diagnose(in);
  EXPECT_NE(d.verdict, Verdict::kHostBound) << d.ToText();
}

TEST(DoctorRules, OneLongWaitInNextDoesNotCancelTheCopyLagOfTheOtherSteps) {
  // 31 steps: the GPU waits 1.5 ms for a batch the loop had after 0.1 ms (1.4 ms of copy lag
  // each). One step: the loop waits 25 ms in Next() while the GPU still works (no GPU wait).
  // Summed over the window the long wait would hide the lag; step by step it is 14%.
  DoctorInput in = WithEvents(Recorded(0.1, 10, 5), 8.5, 1.5);
  BatchTiming& odd = in.batches.back();
  odd.consumer_wait_ns = 25'000'000;
  odd.gpu_busy_ns = 10'000'000;
  odd.gpu_idle_ns = 0;
  const Diagnosis d = Diagnose(in);
  EXPECT_LT(d.consumer_wait_fraction, 0.10);
  EXPECT_EQ(d.verdict, Verdict::kCopyBound) << d.ToText();
}

// Padded rows of a variable-length field: more than a fifth of padding is named, with its
// figures, and packing advised; a fifth or less says nothing.
TEST(DoctorRules, PaddingOverAFifthOfTheRowsIsNamedWithItsFigures) {
  DoctorInput in = Recorded(1, 10, 2);
  in.varlen_items = 600;
  in.varlen_pad_items = 400;
  const Diagnosis d = Diagnose(in);
  bool named = false;
  for (const std::string& advice : d.advice) {
    if (advice.find("40% of the rows' items are padding") != std::string::npos) {
      named = true;
      EXPECT_THAT(advice, HasSubstr("400 padding items per epoch beside 600 real ones"));
      EXPECT_THAT(advice, HasSubstr("gpufeed.Pack"));
    }
  }
  EXPECT_TRUE(named);
  in.varlen_pad_items = 100;
  for (const std::string& advice : Diagnose(in).advice) {
    EXPECT_THAT(advice, Not(HasSubstr("padding")));
  }
}

}  // namespace
}  // namespace gpufeed
