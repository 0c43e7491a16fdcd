// monitor_overhead: the CPU the monitor's sampler costs the process it runs in.
//
// Runs a Monitor on this (otherwise idle) process for a few seconds at each interval and
// prints process CPU time over wall time as % of one core, plus the CPU per sample. The
// sampler does all the work (the main thread sleeps), so the figure is the sampler's cost:
// /proc and cgroup reads, NVML calls (the real library, or the fake named by
// GPUFEED_NVML_LIBRARY), the JSON line and the live line (to /dev/null).
// Targets: < 1 % of one core at 1 s, < 3 % at 100 ms.
#include <fmt/format.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "gpufeed/monitor.h"

namespace {

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct Figures {
  double core_percent;
  double cpu_us_per_sample;
  size_t samples;
};

Figures Measure(std::chrono::milliseconds interval, double seconds, FILE* sink,
                const std::string& jsonl) {
  gpufeed::MonitorOptions options;
  options.interval = interval;
  options.live_line = sink;
  options.jsonl_path = jsonl;
  gpufeed::Monitor monitor(options);  // NVML opened here, outside the measured window
  double cpu0 = CpuSeconds();
  auto wall0 = std::chrono::steady_clock::now();
  monitor.Start();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  monitor.Stop();
  double cpu = CpuSeconds() - cpu0;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  size_t samples = monitor.History().size();
  return {100.0 * cpu / wall, 1e6 * cpu / static_cast<double>(samples), samples};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Prints the CPU cost of the monitor's sampler, as % of one core");
  double seconds = 5;
  app.add_option("--seconds", seconds, "Seconds per interval")->default_val(5);
  CLI11_PARSE(app, argc, argv);

  FILE* sink = std::fopen("/dev/null", "w");
  std::string jsonl = "/dev/null";
  {
    gpufeed::MonitorOptions probe;
    probe.interval = std::chrono::milliseconds(1000);
    fmt::print("{}\n", gpufeed::Monitor(probe).nvml_status());
  }
  double cpu0 = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(1.0));
  fmt::print("baseline (no monitor, 1 s)        {:6.3f} % of one core\n",
             100.0 * (CpuSeconds() - cpu0));
  for (int ms : {1000, 100}) {
    Figures f = Measure(std::chrono::milliseconds(ms), seconds, sink, jsonl);
    fmt::print(
        "interval {:4d} ms, {:.0f} s, {:3d} samples  {:6.3f} % of one core  "
        "({:.0f} us CPU per sample)  target < {} %\n",
        ms, seconds, f.samples, f.core_percent, f.cpu_us_per_sample, ms >= 1000 ? 1 : 3);
  }
  std::fclose(sink);
  return 0;
}
