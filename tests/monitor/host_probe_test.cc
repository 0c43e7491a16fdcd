// Host figures against what /proc and the processes themselves say.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/system/proc_text.h"
#include "gpufeed/error.h"
#include "gpufeed/monitor.h"
#include "monitor/monitor_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// Spins until this process has used `seconds` more CPU time.
void Burn(double seconds) {
  double until = ProcessCpuSeconds() + seconds;
  volatile uint64_t x = 0;
  while (ProcessCpuSeconds() < until) {
    for (int i = 0; i < 10000; ++i) x = x + i;
  }
}

void ReadExactly(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n <= 0) _exit(99);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// utime+stime of a pid, in seconds, straight from /proc.
double ProcCpuSeconds(pid_t pid) {
  std::string text;
  if (!ReadTextFile("/proc/" + std::to_string(pid) + "/stat", &text)) return 0;
  auto stat = ParsePidStat(text);
  return double(stat->utime + stat->stime + stat->cutime + stat->cstime) / sysconf(_SC_CLK_TCK);
}

MonitorOptions NoGpu(pid_t pid) {
  MonitorOptions options;
  options.pid = pid;
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  return options;
}

TEST(HostProbe, TreeCpuAgreesWithProcWithin5PercentIncludingReapedChildren) {
  // The watched child forks two grandchildren. A burns and exits (the child reaps it, so
  // its time moves to the child's cutime); B burns and stays; then the child burns. Each
  // reports the CPU time it measured itself.
  constexpr double kBurn = 0.4;
  int gate[2], result[2];
  ASSERT_EQ(pipe(gate), 0);
  ASSERT_EQ(pipe(result), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setpgid(0, 0);  // one group, so the test can end the whole tree
    auto burner = [&](bool stay) {
      pid_t pid = fork();
      if (pid == 0) {
        char go;
        ReadExactly(gate[0], &go, 1);
        Burn(kBurn);
        double used = ProcessCpuSeconds();
        if (write(result[1], &used, sizeof(used)) != sizeof(used)) _exit(98);
        if (stay) pause();
        _exit(0);
      }
      return pid;
    };
    pid_t a = burner(false);
    burner(true);
    char go;
    ReadExactly(gate[0], &go, 1);
    waitpid(a, nullptr, 0);
    Burn(kBurn);
    double used = ProcessCpuSeconds();
    if (write(result[1], &used, sizeof(used)) != sizeof(used)) _exit(98);
    pause();
    _exit(0);
  }
  // Wait until both grandchildren exist, so the first sample sees the whole tree.
  Monitor monitor(NoGpu(child));
  for (int i = 0; i < 200 && monitor.SampleNow().host.tree_processes < 3; ++i) {
    usleep(10000);
  }
  MonitorSnapshot before = monitor.SampleNow();
  ASSERT_EQ(before.host.tree_processes, 3);
  double proc_before = ProcCpuSeconds(child);
  ASSERT_EQ(write(gate[1], "ggg", 3), 3);
  double reported = 0;
  for (int i = 0; i < 3; ++i) {
    double used = 0;
    ReadExactly(result[0], &used, sizeof(used));
    reported += used;
  }
  usleep(50000);  // let A be reaped and B block
  MonitorSnapshot after = monitor.SampleNow();
  std::vector<pid_t> pids;
  double proc_after = ProcCpuSeconds(child);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string text;
    if (!ReadTextFile(entry.path().string() + "/stat", &text)) continue;
    if (auto stat = ParsePidStat(text); stat && stat->ppid == child) {
      proc_after += ProcCpuSeconds(stat->pid);
    }
  }
  kill(-child, SIGKILL);
  waitpid(child, nullptr, 0);

  ASSERT_TRUE(before.host.tree_cpu_seconds_total && after.host.tree_cpu_seconds_total);
  double measured = *after.host.tree_cpu_seconds_total - *before.host.tree_cpu_seconds_total;
  EXPECT_EQ(after.host.tree_processes, 2);  // A is gone
  EXPECT_NEAR(measured, 3 * kBurn, 0.05 * 3 * kBurn);
  EXPECT_NEAR(measured, reported, 0.05 * reported);
  // /proc read directly: the child (with reaped A) plus the live grandchild B.
  EXPECT_NEAR(*after.host.tree_cpu_seconds_total, proc_after, 0.05 * proc_after);
  EXPECT_GE(proc_before, 0);
  ASSERT_TRUE(after.host.tree_cpu_cores);
  double dt = after.elapsed_seconds - before.elapsed_seconds;
  EXPECT_NEAR(*after.host.tree_cpu_cores, measured / dt, 0.05 * measured / dt);
}

TEST(HostProbe, TreeRssAndPssMatchProc) {
  constexpr size_t kBytes = 64 << 20;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // volatile: the compiler may not drop an allocation nobody reads.
    volatile char* block = static_cast<volatile char*>(malloc(kBytes));
    for (size_t i = 0; i < kBytes; i += 4096) block[i] = 1;  // touched: resident
    char done = block[0];
    if (write(ready[1], &done, 1) != 1) _exit(98);
    pause();
    _exit(0);
  }
  char done;
  ReadExactly(ready[0], &done, 1);
  Monitor monitor(NoGpu(child));
  MonitorSnapshot snapshot = monitor.SampleNow();
  std::string status;
  ASSERT_TRUE(ReadTextFile("/proc/" + std::to_string(child) + "/status", &status));
  uint64_t vm_rss = ParseKeyedValue(status, "VmRSS").value();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(snapshot.host.tree_rss_bytes);
  EXPECT_GE(*snapshot.host.tree_rss_bytes, kBytes);
  EXPECT_NEAR(double(*snapshot.host.tree_rss_bytes), double(vm_rss), 0.05 * vm_rss);
  ASSERT_TRUE(snapshot.host.tree_pss_bytes);
  EXPECT_GE(*snapshot.host.tree_pss_bytes, kBytes * 95 / 100);
  EXPECT_LE(*snapshot.host.tree_pss_bytes, *snapshot.host.tree_rss_bytes);
}

TEST(HostProbe, MachineFiguresMatchTheKernel) {
  testing::ManualClock clock;
  MonitorOptions options = NoGpu(0);
  options.clock = clock.AsFunction();
  Monitor monitor(options);
  MonitorSnapshot first = monitor.SampleNow();
  EXPECT_FALSE(first.host.cpu_utilization_ratio);  // no interval yet: no rate
  Burn(0.05);
  clock.Advance(std::chrono::milliseconds(500));
  MonitorSnapshot second = monitor.SampleNow();
  struct sysinfo info {};
  ASSERT_EQ(sysinfo(&info), 0);
  EXPECT_EQ(*second.host.memory_total_bytes, uint64_t(info.totalram) * info.mem_unit);
  EXPECT_GT(*second.host.memory_used_bytes, 0u);
  EXPECT_LE(*second.host.memory_used_bytes, *second.host.memory_total_bytes);
  ASSERT_TRUE(second.host.cpu_utilization_ratio);
  EXPECT_GT(*second.host.cpu_utilization_ratio, 0.0);
  EXPECT_LE(*second.host.cpu_utilization_ratio, 1.0);
  EXPECT_EQ(second.host.cpu_count, sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(second.host.tree_processes, 1);
  EXPECT_TRUE(second.host.disk_read_bytes_total);
}

TEST(HostProbe, NoSuchPidIsAClearError) {
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  try {
    Monitor monitor(NoGpu(gone));
    FAIL() << "expected an error for PID " << gone;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_EQ(std::string(e.what()), "no process with PID " + std::to_string(gone));
  }
}

TEST(HostProbe, AFinishedTreeHasNoTreeReadingsButTheHostStillHas) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  Monitor monitor(NoGpu(child));
  EXPECT_EQ(monitor.SampleNow().host.tree_processes, 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  MonitorSnapshot snapshot = monitor.SampleNow();
  EXPECT_EQ(snapshot.host.tree_processes, 0);
  EXPECT_FALSE(snapshot.host.tree_rss_bytes);
  EXPECT_TRUE(snapshot.host.memory_total_bytes);
  EXPECT_THAT(FormatStatusLine(snapshot), HasSubstr("| proc exited"));
}

}  // namespace
}  // namespace gpufeed
