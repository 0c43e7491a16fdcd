// The Prometheus endpoint: scraped over HTTP, checked by promtool, and its address errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>

#include "gpufeed/error.h"
#include "gpufeed/monitor.h"
#include "monitor/metrics_http_server.h"
#include "monitor/monitor_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
using testing::HttpBody;
using testing::HttpGet;
using ::testing::StartsWith;
using testing::TempDir;

constexpr const char* kPromtool = "/usr/bin/promtool";

TEST(Prometheus, ScrapedEndpointPassesPromtoolCheckMetrics) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " is not installed";
  TempDir dir;
  setenv("GPUFEED_FAKE_NVML_SCRIPT",
         dir.Write("script.txt",
                   "devices 2\nname 0 Fake \"quoted\" GPU\\0\nutil 0 85\nmem_util 0 40\n"
                   "memory_total 0 25769803776\nmemory_used 0 1000\npower 0 250500\n"
                   "temperature 0 65\nsm_clock 0 1980\npcie_rx 0 1000\npcie_tx 0 2000\n"
                   "process 0 self 1073741824\nprocess_util 0 self 55\nutil 1 10\n")
             .c_str(),
         1);
  MonitorOptions options;
  options.nvml_library = FAKE_NVML_PATH;
  options.prometheus_address = "127.0.0.1:0";
  Monitor monitor(options);
  monitor.SampleNow();
  usleep(20000);
  monitor.SampleNow();  // a second sample: rates are there too
  std::string response = HttpGet(monitor.prometheus_port());
  EXPECT_THAT(response, StartsWith("HTTP/1.0 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  std::string body = HttpBody(response);
  EXPECT_THAT(body, HasSubstr("# TYPE gpufeed_process_cpu_seconds_total counter\n"));
  EXPECT_THAT(body, HasSubstr("# HELP gpufeed_gpu_utilization_ratio "));
  EXPECT_THAT(body, HasSubstr(R"(name="Fake \"quoted\" GPU\\0")"));
  std::string path = dir.Write("metrics.txt", body);
  std::string command = std::string(kPromtool) + " check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output << "\n---\n" << body;
  EXPECT_EQ(output, "") << body;  // no lint complaints either
}

TEST(Prometheus, OtherPathsAre404AndTheServerKeepsServing) {
  MetricsHttpServer server("127.0.0.1:0", [] { return std::string("x 1\n"); });
  EXPECT_THAT(HttpGet(server.port(), "/nope"), StartsWith("HTTP/1.0 404"));
  EXPECT_EQ(HttpBody(HttpGet(server.port(), "/metrics")), "x 1\n");
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(server.port()));
}

TEST(Prometheus, APortInUseIsAnErrorNamingTheAddress) {
  MetricsHttpServer first("127.0.0.1:0", [] { return std::string(); });
  std::string address = "127.0.0.1:" + std::to_string(first.port());
  MonitorOptions options;
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  options.prometheus_address = address;
  try {
    Monitor monitor(options);
    FAIL() << "expected the port to be in use";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr(address));
    EXPECT_THAT(e.what(), HasSubstr("Address already in use"));
  }
}

TEST(Prometheus, AddressesDefaultToLoopbackAndBadOnesAreRejected) {
  std::string host;
  int port = -1;
  ParseListenAddress("9400", &host, &port);
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9400);
  ParseListenAddress(":9401", &host, &port);
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9401);
  ParseListenAddress("0.0.0.0:80", &host, &port);
  EXPECT_EQ(host, "0.0.0.0");
  ParseListenAddress("[::1]:9402", &host, &port);
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9402);
  for (const char* bad : {"", "host:", "127.0.0.1:x", "127.0.0.1:70000", "::1:80", "[::1]80"}) {
    EXPECT_THROW(ParseListenAddress(bad, &host, &port), Error) << bad;
  }
  EXPECT_THROW(MetricsHttpServer("no.such.host.invalid:0", [] { return std::string(); }), Error);
}

}  // namespace
}  // namespace gpufeed
