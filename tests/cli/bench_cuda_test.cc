// `gpufeed bench` and `gpufeed demo` on a CUDA device, through the fake driver: a run with a
// simulated step on the GPU's default stream finishes its queued steps while the loader's
// device is alive, and leaves nothing behind (allocations, streams, events, contexts).
#include <gtest/gtest.h>

#include "cli/bench_run.h"
#include "fake_cuda_fixture.h"
#include "gpufeed/sources.h"

namespace gpufeed::cli {
namespace {

using BenchCudaTest = testing::FakeCudaTest;

BenchConfig CudaRun(double step_ms) {
  BenchConfig config;
  config.open.device = "cuda";
  config.open.loader.batch_size = 64;
  config.open.loader.workers = 2;
  config.epochs = 2;
  config.step_ms = step_ms;
  config.measure_ceiling = false;
  config.monitor = false;
  return config;
}

TEST_F(BenchCudaTest, ARunWithStepsOnTheGpuFinishesThemBeforeItsDeviceGoes) {
  const BenchResult result =
      RunBench(OpenSynthetic(ParseSchema("x:float32[16],label:int64[]"), 1000, 5), CudaRun(1),
               [](const BenchProgress&) {});
  EXPECT_EQ(result.samples, 2000);
  // The steps were timed by events on the stream they ran on.
  EXPECT_GT(result.gpu_busy_fraction_events, 0);
  EXPECT_LE(result.gpu_busy_fraction_events, 1);
  // TearDown: no call on a destroyed context, and nothing left behind.
}

TEST_F(BenchCudaTest, ARunWithoutAStepLeavesNothingBehind) {
  const BenchResult result =
      RunBench(OpenSynthetic(ParseSchema("x:float32[16]"), 500, 5), CudaRun(0),
               [](const BenchProgress&) {});
  EXPECT_EQ(result.samples, 1000);
  EXPECT_EQ(result.gpu_busy_fraction_events, -1);
}

}  // namespace
}  // namespace gpufeed::cli
