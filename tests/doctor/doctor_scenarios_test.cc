// Scripted scenarios, each a real loader run: the doctor must name the bottleneck. Each also
// runs beside a competing CPU burner (one busy process per core): the verdict must then be
// the same or "cpu-starved", and a starved verdict that names a stage names the right one.
// On a loaded machine (CI runs two tests at once) the plain runs may be starved too, so the
// same rule holds for them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/io/fault_file.h"
#include "device/cuda_device.h"
#include "fake_cuda_fixture.h"
#include "gpufeed/doctor.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

void BurnCpu(std::chrono::milliseconds how_long) {
  const auto end = Clock::now() + how_long;
  volatile uint64_t x = 1;
  while (Clock::now() < end) {
    for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ULL + 1;
  }
}

LoaderOptions Options(int64_t batch, std::shared_ptr<Device> device = nullptr) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = 2;
  o.prefetch = 4;  // absorbs a noisy machine's jitter in the steady-state scenarios
  o.rank = 0;
  o.world_size = 1;
  o.device = std::move(device);
  return o;
}

// Runs `batches` steps of `step` and diagnoses them, with the process CPU measured.
Diagnosis RunAndDiagnose(Loader& loader, int batches, const std::function<void()>& step,
              std::optional<double> gpu_utilization = std::nullopt) {
  // The first batches pay for start-up (threads, buffers): judge the steady state after them.
  constexpr int kWarmup = 4;
  for (int i = 0; i < kWarmup; ++i) {
    if (!loader.Next()) loader.Next();
    step();
  }
  const double cpu0 = CpuSeconds();
  const auto t0 = Clock::now();
  for (int i = 0; i < batches; ++i) {
    auto batch = loader.Next();
    if (!batch) batch = loader.Next();  // the next epoch
    step();
  }
  loader.Next();  // closes the last step's timing
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  DoctorInput in = CollectDoctorInput(loader, nullptr, static_cast<size_t>(batches));
  in.process_cpu_cores = (CpuSeconds() - cpu0) / wall;
  in.gpu_utilization = gpu_utilization;
  in.min_seconds = 0;  // the scenarios are short; the batch count still counts
  return Diagnose(in);
}

// One busy shell loop per core for the life of the object: other processes that take the
// cores, as a neighbour's job on a shared node does.
class CpuBurner {
 public:
  CpuBurner() {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < cores; ++i) {
      pid_t pid = 0;
      const char* argv[] = {"/bin/sh", "-c", "while :; do :; done", nullptr};
      if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv),
                      environ) == 0) {
        pids_.push_back(pid);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the loops are running
  }
  ~CpuBurner() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  CpuBurner(const CpuBurner&) = delete;
  CpuBurner& operator=(const CpuBurner&) = delete;
  bool running() const { return !pids_.empty(); }

 private:
  std::vector<pid_t> pids_;
};

// The verdict `want` with stage `stage`, or "cpu-starved" naming `stage` or none.
void ExpectVerdict(const Diagnosis& d, Verdict want, std::string_view stage = "") {
  if (d.verdict == Verdict::kCpuStarved) {
    if (d.stage != Stage::kNone) {
      EXPECT_EQ(StageName(d.stage), stage) << d.ToText();
    }
    return;
  }
  EXPECT_EQ(d.verdict, want) << d.ToText();
  EXPECT_EQ(StageName(d.stage), stage) << d.ToText();
}

std::shared_ptr<Source> MemorySource(int64_t n) {
  static std::vector<float> data(static_cast<size_t>(100000 * 16), 1.0f);
  return OpenMemory({{ParseSchema("x:float32[16]").fields[0], data.data(), n}});
}

void SlowSourceIsInputBoundOnRead(bool burn) {
  const fs::path dir = fs::temp_directory_path() / ("gpufeed_doctor_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<float> x(4000 * 8, 0.5f);
  WriteNpy((dir / "x.npy").string(), ParseSchema("x:float32[8]").fields[0], 4000, x.data());
  FaultInjectingFileSystem::Rules slow;
  slow.delay_us = 300;  // a slow disk: every read waits
  NumpyOptions o;
  o.file_system = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem(), slow);
  {
    Loader loader(OpenNumpy(dir.string(), o), Options(32));
    std::optional<CpuBurner> burner;
    if (burn) burner.emplace();
    const Diagnosis d = RunAndDiagnose(loader, 20, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    ExpectVerdict(d, Verdict::kInputBound, "read");
  }
  fs::remove_all(dir);
}
TEST(DoctorScenario, SlowSourceIsInputBoundOnRead) { SlowSourceIsInputBoundOnRead(false); }
TEST(DoctorScenario, SlowSourceBesideABurnerIsInputBoundOrStarved) {
  SlowSourceIsInputBoundOnRead(true);
}

void CpuHeavyTransformIsInputBoundOnTransform(bool burn) {
  class Heavy : public Transform {
   public:
    std::string name() const override { return "heavy"; }
    Schema OutputSchema(const Schema& in) const override { return in; }
    void Apply(const Schema&, const BatchView&, uint64_t) const override {
      BurnCpu(std::chrono::milliseconds(15));
    }
  };
  LoaderOptions o = Options(64);
  o.transforms = {std::make_shared<Heavy>()};
  Loader loader(MemorySource(10000), o);
  std::optional<CpuBurner> burner;
  if (burn) burner.emplace();
  const Diagnosis d = RunAndDiagnose(loader, 20, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  ExpectVerdict(d, Verdict::kInputBound, "transform");
}
TEST(DoctorScenario, CpuHeavyTransformIsInputBoundOnTransform) {
  CpuHeavyTransformIsInputBoundOnTransform(false);
}
TEST(DoctorScenario, CpuHeavyTransformBesideABurnerIsInputBoundOrStarved) {
  CpuHeavyTransformIsInputBoundOnTransform(true);
}

class DoctorCudaScenario : public testing::FakeCudaTest {};

void SlowCopiesAreCopyBound(bool burn) {
  fake_cuda_set_copy_delay_us(15'000);  // a slow link: each copy takes 15 ms
  {
    auto device = cuda::OpenCudaDevice();
    Loader loader(MemorySource(10000), Options(64, device));
    std::optional<CpuBurner> burner;
    if (burn) burner.emplace();
    const Diagnosis d = RunAndDiagnose(loader, 16, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    ExpectVerdict(d, Verdict::kCopyBound, "copy");
  }
}
TEST_F(DoctorCudaScenario, SlowCopiesAreCopyBound) { SlowCopiesAreCopyBound(false); }
TEST_F(DoctorCudaScenario, SlowCopiesBesideABurnerAreCopyBoundOrStarved) {
  SlowCopiesAreCopyBound(true);
}

// The training loop on a consumer stream of the fake driver: each step waits for its batch,
// runs a `kernel_us` kernel, and the host waits for it (loss.item()). The doctor then reads
// the event-measured GPU figures the loader gathered.
class DoctorStreamScenario : public testing::FakeCudaTest {
 protected:
  Diagnosis RunOnStream(Loader& loader, int batches, int64_t kernel_us) {
    auto device = std::static_pointer_cast<cuda::CudaDevice>(loader.options().device);
    const cuda::CudaDriver& driver = device->driver();
    cuda::CUstream stream = nullptr;
    {
      cuda::CurrentContextScope scope(*device->context());
      EXPECT_EQ(driver.StreamCreate(&stream, cuda::kStreamNonBlocking), cuda::kSuccess);
    }
    const auto step = [&] {
      auto batch = loader.Next();
      if (!batch) batch = loader.Next();  // the next epoch
      batch->WaitOn(reinterpret_cast<uintptr_t>(stream));
      fake_cuda_stream_sleep(stream, kernel_us);
      driver.StreamSynchronize(stream);
    };
    for (int i = 0; i < 4; ++i) step();  // start-up
    for (int i = 0; i < batches; ++i) step();
    loader.Next();  // ends the last step
    driver.StreamSynchronize(stream);
    DoctorInput in = CollectDoctorInput(loader, nullptr, static_cast<size_t>(batches));
    in.min_seconds = 0;  // the scenarios are short; the batch count still counts
    const Diagnosis d = Diagnose(in);
    cuda::CurrentContextScope scope(*device->context());
    driver.StreamDestroy(stream);
    return d;
  }
};

TEST_F(DoctorStreamScenario, ComputeBoundStepMeasuredByEventsIsHealthy) {
  auto device = cuda::OpenCudaDevice();
  Loader loader(MemorySource(10000), Options(64, device));
  // 20 ms steps: the host's part of a step (Next, the wait, the launch) may take 2 ms on a
  // loaded machine under a sanitizer and the GPU still be busy over 90% of the time.
  const Diagnosis d = RunOnStream(loader, 20, 20'000);
  EXPECT_NE(d.verdict, Verdict::kInputBound) << d.ToText();
  EXPECT_EQ(d.verdict, Verdict::kHealthy) << d.ToText();
  EXPECT_EQ(d.gpu_measure, "events");
  EXPECT_GT(d.gpu_busy_fraction, 0.9) << d.ToText();
  EXPECT_THAT(d.headline, ::testing::HasSubstr("measured by events on the training stream"));
}

TEST_F(DoctorStreamScenario, SlowSourceMakesTheGpuWaitAndIsInputBoundOnRead) {
  const fs::path dir =
      fs::temp_directory_path() / ("gpufeed_doctor_stream_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<float> x(4000 * 8, 0.5f);
  WriteNpy((dir / "x.npy").string(), ParseSchema("x:float32[8]").fields[0], 4000, x.data());
  FaultInjectingFileSystem::Rules slow;
  slow.delay_us = 300;
  NumpyOptions o;
  o.file_system = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem(), slow);
  {
    auto device = cuda::OpenCudaDevice();
    Loader loader(OpenNumpy(dir.string(), o), Options(32, device));
    const Diagnosis d = RunOnStream(loader, 20, 1'000);
    ExpectVerdict(d, Verdict::kInputBound, "read");
    EXPECT_EQ(d.gpu_measure, "events");
    EXPECT_LT(d.gpu_busy_fraction, 0.6) << d.ToText();  // ~0.2 here; a loaded machine oversleeps
    EXPECT_THAT(d.headline, ::testing::HasSubstr("the GPU waited"));
  }
  fs::remove_all(dir);
}

void ComputeBoundStepIsHealthy(bool burn) {
  Loader loader(MemorySource(10000), Options(64));
  std::optional<CpuBurner> burner;
  if (burn) burner.emplace();
  // The GPU computes for 10 ms a step (the host thread waits on it) and NVML reads 95%.
  const Diagnosis d =
      RunAndDiagnose(loader, 20, [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }, 0.95);
  ExpectVerdict(d, Verdict::kHealthy);
}
TEST(DoctorScenario, ComputeBoundStepIsHealthy) { ComputeBoundStepIsHealthy(false); }
TEST(DoctorScenario, ComputeBoundStepBesideABurnerIsHealthyOrStarved) {
  ComputeBoundStepIsHealthy(true);
}

void HostBoundStepIsHostBound(bool burn) {
  Loader loader(MemorySource(10000), Options(64));
  std::optional<CpuBurner> burner;
  if (burn) burner.emplace();
  // The step burns 10 ms of host CPU (launches, synchronizations) and the GPU reads 15%.
  const Diagnosis d = RunAndDiagnose(loader, 20, [] { BurnCpu(std::chrono::milliseconds(10)); }, 0.15);
  ExpectVerdict(d, Verdict::kHostBound);
}
TEST(DoctorScenario, HostBoundStepIsHostBound) { HostBoundStepIsHostBound(false); }
TEST(DoctorScenario, HostBoundStepBesideABurnerIsHostBoundOrStarved) {
  HostBoundStepIsHostBound(true);
}

// Burns `how_long` of this thread's CPU time (not wall time: a thread kept off the CPU takes
// longer).
void BurnThreadCpu(std::chrono::microseconds how_long) {
  const auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  };
  const auto end = cpu_now() + how_long;
  volatile uint64_t x = 1;
  while (cpu_now() < end) {
    for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ULL + 1;
  }
}

// Workers whose transform needs 3 ms of CPU a batch, beside two busy processes per core: a
// worker gets about a third of a core and spends most of each batch runnable without one.
// The verdict names the starvation (and the stage it hit), not the transform's cost.
TEST(DoctorScenario, WorkersKeptOffTheCoresAreCpuStarved) {
  class Needs3Ms : public Transform {
   public:
    std::string name() const override { return "needs-3ms"; }
    Schema OutputSchema(const Schema& in) const override { return in; }
    void Apply(const Schema&, const BatchView&, uint64_t) const override {
      BurnThreadCpu(std::chrono::microseconds(3000));
    }
  };
  LoaderOptions o = Options(64);
  o.transforms = {std::make_shared<Needs3Ms>()};
  Loader loader(MemorySource(10000), o);
  CpuBurner burner1, burner2;
  const Diagnosis d = RunAndDiagnose(loader, 20, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  if (d.consumer_wait_fraction < 0.10) {
    GTEST_SKIP() << "the loop did not wait here: " << d.ToText();
  }
  EXPECT_EQ(d.verdict, Verdict::kCpuStarved) << d.ToText();
  EXPECT_THAT(d.headline, ::testing::HasSubstr("runnable but had no CPU"));
  EXPECT_GE(d.starved_fraction, 0.5) << d.ToText();
}

}  // namespace
}  // namespace gpufeed
