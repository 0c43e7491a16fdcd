// The GPU side of the monitor against the fake libnvidia-ml.so.1 (tests/monitor/fake_nvml):
// scripted readings must come out unchanged in the live line, JSON lines and Prometheus text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "gpufeed/error.h"
#include "gpufeed/monitor.h"
#include "monitor/monitor_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
using testing::HttpBody;
using testing::HttpGet;
using testing::ManualClock;
using ::testing::Not;
using testing::ReadFile;
using ::testing::StartsWith;
using testing::TempDir;

constexpr uint64_t kGiB = 1ull << 30;

class NvmlFakeTest : public ::testing::Test {
 protected:
  // Writes the script and points the fake at it. The fake rereads it at each nvmlInit.
  void Script(const std::string& text) {
    setenv("GPUFEED_FAKE_NVML_SCRIPT", dir_.Write("script.txt", text).c_str(), 1);
  }
  MonitorOptions Options(const char* library = FAKE_NVML_PATH) {
    MonitorOptions options;
    options.nvml_library = library;
    options.clock = clock_.AsFunction();
    return options;
  }
  TempDir dir_;
  ManualClock clock_;
};

constexpr const char* kFullScript = R"(# one GPU with every reading scripted
devices 1
name 0 Fake H100
util 0 85
mem_util 0 40
memory_total 0 25769803776
memory_used 0 13207024435
memory_reserved 0 536870912
power 0 250500
temperature 0 65
sm_clock 0 1980
pcie_rx 0 1000
pcie_tx 0 na
process 0 self 1073741824
process 0 1 5000
process_util 0 self 55
process_util 0 1 30
process_race 0 2
)";

TEST_F(NvmlFakeTest, ScriptedReadingsReachTheLiveLineJsonLinesAndPrometheus) {
  Script(kFullScript);
  MonitorOptions options = Options();
  options.jsonl_path = dir_.File("samples.jsonl");
  options.prometheus_address = "127.0.0.1:0";
  FILE* live = std::tmpfile();
  options.live_line = live;  // not a terminal: one line per sample
  Monitor monitor(options);
  EXPECT_EQ(monitor.nvml_status(), std::string("NVML: 1 GPU (") + FAKE_NVML_PATH + ")");
  monitor.Start();
  usleep(50000);  // /proc/stat ticks must move for a machine CPU figure
  clock_.Advance(std::chrono::seconds(1));
  monitor.SampleNow();
  monitor.Stop();

  auto latest = monitor.Latest();
  ASSERT_TRUE(latest);
  ASSERT_EQ(latest->gpus.size(), 1u);
  const GpuSample& gpu = latest->gpus[0];
  EXPECT_EQ(gpu.name, "Fake H100");
  EXPECT_DOUBLE_EQ(*gpu.utilization_ratio, 0.85);
  EXPECT_DOUBLE_EQ(*gpu.memory_utilization_ratio, 0.40);
  EXPECT_EQ(*gpu.memory_used_bytes, 13207024435u);  // the v2 figure: reserved not included
  EXPECT_EQ(*gpu.memory_total_bytes, 24 * kGiB);
  EXPECT_DOUBLE_EQ(*gpu.power_watts, 250.5);
  EXPECT_DOUBLE_EQ(*gpu.temperature_celsius, 65);
  EXPECT_DOUBLE_EQ(*gpu.sm_clock_hertz, 1.98e9);
  EXPECT_DOUBLE_EQ(*gpu.pcie_rx_bytes_per_second, 1000 * 1024.0);
  EXPECT_FALSE(gpu.pcie_tx_bytes_per_second);  // NOT_SUPPORTED stays n/a, not 0
  // Only this process's entries count: pid 1 is not in the tree. The process list was
  // re-asked after INSUFFICIENT_SIZE answers (process_race).
  EXPECT_EQ(*gpu.tree_memory_bytes, kGiB);
  EXPECT_DOUBLE_EQ(*gpu.tree_sm_utilization_ratio, 0.55);

  // Live line.
  EXPECT_THAT(FormatStatusLine(*latest), StartsWith("GPU 85% | VRAM 12.3/24.0 GiB (51%) | CPU "));
  std::fseek(live, 0, SEEK_SET);
  char line[512];
  int lines = 0;
  while (std::fgets(line, sizeof(line), live) != nullptr) {
    EXPECT_THAT(line, StartsWith("GPU 85% | VRAM 12.3/24.0 GiB (51%) | CPU "));
    ++lines;
  }
  EXPECT_EQ(lines, 2);
  std::fclose(live);

  // JSON lines: one object per sample, readings unchanged, n/a as null.
  std::string jsonl = ReadFile(dir_.File("samples.jsonl"));
  std::vector<nlohmann::json> records;
  size_t pos = 0;
  while (pos < jsonl.size()) {
    size_t end = jsonl.find('\n', pos);
    records.push_back(nlohmann::json::parse(jsonl.substr(pos, end - pos)));
    pos = end + 1;
  }
  ASSERT_EQ(records.size(), 2u);
  const nlohmann::json& g = records[1]["gpus"][0];
  EXPECT_EQ(g["name"], "Fake H100");
  EXPECT_DOUBLE_EQ(g["utilization_ratio"].get<double>(), 0.85);
  EXPECT_EQ(g["memory_used_bytes"].get<uint64_t>(), 13207024435u);
  EXPECT_EQ(g["memory_total_bytes"].get<uint64_t>(), 24 * kGiB);
  EXPECT_DOUBLE_EQ(g["power_watts"].get<double>(), 250.5);
  EXPECT_DOUBLE_EQ(g["temperature_celsius"].get<double>(), 65);
  EXPECT_DOUBLE_EQ(g["sm_clock_hertz"].get<double>(), 1.98e9);
  EXPECT_TRUE(g["pcie_tx_bytes_per_second"].is_null());
  EXPECT_EQ(g["tree_memory_bytes"].get<uint64_t>(), kGiB);
  EXPECT_DOUBLE_EQ(records[1]["elapsed_seconds"].get<double>(), 1.0);
  EXPECT_FALSE(records[1]["host"]["cpu_utilization_ratio"].is_null());

  // Prometheus, scraped over HTTP.
  std::string response = HttpGet(monitor.prometheus_port());
  EXPECT_THAT(response, StartsWith("HTTP/1.0 200 OK\r\n"));
  std::string body = HttpBody(response);
  const std::string labels = R"({gpu="0",name="Fake H100"})";
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_utilization_ratio" + labels + " 0.85\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_memory_used_bytes" + labels + " 13207024435\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_memory_total_bytes" + labels + " 25769803776\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_power_watts" + labels + " 250.5\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_temperature_celsius" + labels + " 65\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_sm_clock_hertz" + labels + " 1980000000\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_process_memory_used_bytes" + labels + " 1073741824\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_nvml_up 1\n"));
  EXPECT_THAT(body, HasSubstr("gpufeed_monitor_samples_total 2\n"));
  EXPECT_THAT(body, Not(HasSubstr("gpufeed_gpu_pcie_transmit")));
}

TEST_F(NvmlFakeTest, ADriverWithoutV2SymbolsFallsBackToV1Calls) {
  Script(kFullScript);
  Monitor monitor(Options(FAKE_NVML_NO_V2_PATH));
  MonitorSnapshot snapshot = monitor.SampleNow();
  ASSERT_EQ(snapshot.gpus.size(), 1u);
  // The v1 memory call counts the driver's reserved memory as used.
  EXPECT_EQ(*snapshot.gpus[0].memory_used_bytes, 13207024435u + 536870912u);
  // The unsuffixed process call fills the 16-byte v1 struct.
  EXPECT_EQ(*snapshot.gpus[0].tree_memory_bytes, kGiB);
  EXPECT_DOUBLE_EQ(*snapshot.gpus[0].utilization_ratio, 0.85);
}

TEST_F(NvmlFakeTest, UnsupportedReadingsAreNaEverywhereNeverZero) {
  Script("devices 1\nname 0 Old GPU\nutil 0 na\nmemory_total 0 na\n");
  MonitorOptions options = Options();
  options.jsonl_path = dir_.File("samples.jsonl");
  Monitor monitor(options);
  monitor.Start();
  monitor.Stop();
  MonitorSnapshot snapshot = *monitor.Latest();
  ASSERT_EQ(snapshot.gpus.size(), 1u);
  const GpuSample& gpu = snapshot.gpus[0];
  EXPECT_FALSE(gpu.utilization_ratio);
  EXPECT_FALSE(gpu.memory_used_bytes);
  EXPECT_FALSE(gpu.power_watts);
  EXPECT_FALSE(gpu.temperature_celsius);
  EXPECT_FALSE(gpu.sm_clock_hertz);
  EXPECT_FALSE(gpu.tree_sm_utilization_ratio.has_value() && *gpu.tree_sm_utilization_ratio != 0);
  EXPECT_THAT(FormatStatusLine(snapshot), StartsWith("GPU n/a | VRAM n/a | CPU "));
  auto record = nlohmann::json::parse(ReadFile(dir_.File("samples.jsonl")));
  EXPECT_TRUE(record["gpus"][0]["utilization_ratio"].is_null());
  EXPECT_TRUE(record["gpus"][0]["memory_used_bytes"].is_null());
  EXPECT_TRUE(record["gpus"][0]["power_watts"].is_null());
}

TEST_F(NvmlFakeTest, NoNvmlLibraryLeavesGpuFieldsNaAndSaysWhyOnce) {
  MonitorOptions options = Options("/nonexistent/libnvidia-ml.so.1");
  FILE* live = std::tmpfile();
  options.live_line = live;
  options.interval = std::chrono::milliseconds(100);
  Monitor monitor(options);
  EXPECT_THAT(monitor.nvml_status(), HasSubstr("GPU fields n/a"));
  EXPECT_THAT(monitor.nvml_status(), HasSubstr("/nonexistent/libnvidia-ml.so.1"));
  monitor.Start();
  usleep(50000);
  clock_.Advance(std::chrono::seconds(1));
  monitor.SampleNow();
  clock_.Advance(std::chrono::seconds(1));
  monitor.SampleNow();
  monitor.Stop();
  MonitorSnapshot snapshot = *monitor.Latest();
  EXPECT_TRUE(snapshot.gpus.empty());
  // Everything else works.
  EXPECT_TRUE(snapshot.host.cpu_utilization_ratio);
  EXPECT_GT(snapshot.host.memory_total_bytes.value_or(0), 0u);
  EXPECT_GT(snapshot.host.tree_rss_bytes.value_or(0), 0u);
  EXPECT_THAT(FormatStatusLine(snapshot), StartsWith("GPU n/a | VRAM n/a | CPU "));
  std::fseek(live, 0, SEEK_SET);
  std::string printed;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), live) != nullptr) printed += buffer;
  std::fclose(live);
  size_t first = printed.find("GPU fields n/a");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(printed.find("GPU fields n/a", first + 1), std::string::npos) << printed;
}

TEST_F(NvmlFakeTest, AFailingNvmlInitIsReportedWithTheDriversWords) {
  Script("init_error 9\n");
  Monitor monitor(Options());
  EXPECT_THAT(monitor.nvml_status(), HasSubstr("Driver Not Loaded"));
  EXPECT_TRUE(monitor.SampleNow().gpus.empty());
}

TEST_F(NvmlFakeTest, LowUtilizationWarningFiresExactlyWhenTheScriptSaysSo) {
  // GPU 0 drops below 30% at t=2 s and stays there; with a 3 s rule the warning is due at
  // the sample of t=5 s and not before. GPU 1 stays busy and never warns.
  Script("devices 2\nutil 0 90 90 10 25 10 10 10 10\nutil 1 95\n");
  MonitorOptions options = Options();
  options.low_utilization_duration = std::chrono::seconds(3);
  options.stall_summary = [] { return std::string("waiting on data 72% of the time"); };
  std::vector<std::string> called;
  options.on_warning = [&](const std::string& w) { called.push_back(w); };
  options.prometheus_address = "127.0.0.1:0";
  Monitor monitor(options);
  for (int t = 0; t <= 7; ++t) {
    monitor.SampleNow();
    EXPECT_EQ(monitor.Warnings().size(), t < 5 ? 0u : 1u) << "after the sample at t=" << t;
    clock_.Advance(std::chrono::seconds(1));
  }
  ASSERT_EQ(called.size(), 1u);
  EXPECT_EQ(called[0],
            "GPU 0 utilization below 30% for 3.0 s (t=2.0-5.0 s, mean 14%); loader: waiting on "
            "data 72% of the time");
  EXPECT_THAT(HttpBody(HttpGet(monitor.prometheus_port())),
              HasSubstr("gpufeed_monitor_low_utilization_warnings_total 1\n"));
  MonitorSummary summary = monitor.Summary();
  EXPECT_EQ(summary.warnings, called);
  EXPECT_THAT(summary.ToText(), HasSubstr("gpu1_utilization"));
}

TEST_F(NvmlFakeTest, TheSamplerThreadKeepsSamplingUntilStopped) {
  Script(kFullScript);
  MonitorOptions options;
  options.nvml_library = FAKE_NVML_PATH;
  options.interval = std::chrono::milliseconds(100);
  options.prometheus_address = "127.0.0.1:0";
  Monitor monitor(options);
  monitor.Start();
  std::string body;
  for (int i = 0; i < 50 && monitor.History().size() < 4; ++i) {
    body = HttpBody(HttpGet(monitor.prometheus_port()));  // scrapes race with sampling
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  monitor.Stop();
  size_t samples = monitor.History().size();
  EXPECT_GE(samples, 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_EQ(monitor.History().size(), samples);  // stopped means stopped
  EXPECT_THAT(body, HasSubstr("gpufeed_gpu_utilization_ratio"));
  EXPECT_LT(monitor.History().back().elapsed_seconds, 30.0);
}

TEST(MonitorOptionsTest, AnIntervalBelow100MsIsRejected) {
  MonitorOptions options;
  options.interval = std::chrono::milliseconds(50);
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  EXPECT_THROW(Monitor{options}, Error);
}

}  // namespace
}  // namespace gpufeed
