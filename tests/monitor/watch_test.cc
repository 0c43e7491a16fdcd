// `gpufeed watch`, run as a program (tests/monitor/watch_driver.cc): exit codes, signals and
// the clear errors.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "monitor/metrics_http_server.h"
#include "monitor/monitor_test_util.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::TempDir;

class WatchTest : public ::testing::Test {
 protected:
  // Starts the driver with `args`; its stderr goes to a file read by Stderr().
  pid_t Start(std::vector<std::string> args) {
    args.insert(args.begin(), {WATCH_DRIVER_PATH, "watch"});
    err_ = dir_.File("stderr" + std::to_string(++runs_) + ".txt");
    std::string err = err_;
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      setenv("GPUFEED_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
      for (const auto& [name, value] : env_) setenv(name.c_str(), value.c_str(), 1);
      execv(argv[0], argv.data());
      _exit(200);
    }
    return pid;
  }
  // The exit code, or 128+N for signal N.
  int Wait(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  int Run(std::vector<std::string> args) { return Wait(Start(std::move(args))); }
  // The stderr of the latest Start.
  std::string Stderr() { return ReadFile(err_); }

  TempDir dir_;
  std::vector<std::pair<std::string, std::string>> env_;  // set in the driver's environment
  int runs_ = 0;
  std::string err_;
};

TEST_F(WatchTest, ReturnsTheChildsExitCodeAfterTheLiveLineAndSummary) {
  std::string jsonl = dir_.File("watch.jsonl");
  EXPECT_EQ(Run({"--interval", "0.1", "--jsonl", jsonl, "--", "sh", "-c", "sleep 0.5; exit 3"}), 3);
  std::string err = Stderr();
  EXPECT_THAT(err, HasSubstr("GPU fields n/a"));
  EXPECT_THAT(err, HasSubstr("GPU n/a | VRAM n/a | CPU "));
  EXPECT_THAT(err, HasSubstr("sh exited with code 3 after"));
  EXPECT_THAT(err, HasSubstr("gpufeed monitor: "));
  EXPECT_THAT(err, HasSubstr("ram_used"));
  std::string lines = ReadFile(jsonl);
  EXPECT_GE(std::count(lines.begin(), lines.end(), '\n'), 3) << lines;
}

TEST_F(WatchTest, AChildThatExitsAtOnceStillGetsItsSummaryAndCode) {
  EXPECT_EQ(Run({"--", "sh", "-c", "exit 5"}), 5);
  std::string err = Stderr();
  EXPECT_THAT(err, HasSubstr("sh exited with code 5"));
  EXPECT_THAT(err, HasSubstr("gpufeed monitor: 1 sample"));
  EXPECT_EQ(Run({"--", "true"}), 0);
  EXPECT_THAT(Stderr(), HasSubstr("true exited with code 0"));
}

TEST_F(WatchTest, ACommandThatCannotRunExits127WithAMessage) {
  EXPECT_EQ(Run({"--", "gpufeed-no-such-command", "x"}), 127);
  EXPECT_THAT(Stderr(), HasSubstr("gpufeed-no-such-command: command not found"));
}

TEST_F(WatchTest, NoSuchPidIsAClearError) {
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  EXPECT_NE(Run({"--pid", std::to_string(gone)}), 0);
  EXPECT_THAT(Stderr(), HasSubstr("no process with PID " + std::to_string(gone)));
}

TEST_F(WatchTest, APortInUseIsReportedBeforeTheCommandRuns) {
  MetricsHttpServer taken("127.0.0.1:0", [] { return std::string(); });
  std::string address = "127.0.0.1:" + std::to_string(taken.port());
  std::string marker = dir_.File("ran");
  EXPECT_NE(Run({"--prometheus", address, "--", "touch", marker}), 0);
  EXPECT_THAT(Stderr(), HasSubstr("cannot serve Prometheus metrics on " + address));
  EXPECT_THAT(Stderr(), HasSubstr("Address already in use"));
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the command ran anyway";
}

TEST_F(WatchTest, SigtermAndSigintAreForwardedToTheChild) {
  for (int signal_number : {SIGTERM, SIGINT}) {
    pid_t watch = Start({"--interval", "0.1", "--", "sleep", "30"});
    // Wait for the live line: by then the child runs and the handlers are in place.
    for (int i = 0; i < 300 && Stderr().find("| CPU ") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto start = std::chrono::steady_clock::now();
    kill(watch, signal_number);
    EXPECT_EQ(Wait(watch), 128 + signal_number);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_THAT(Stderr(), HasSubstr("sleep was killed by signal " + std::to_string(signal_number)));
  }
}

// Ctrl-C on a terminal reaches the whole foreground process group: the child gets it, the
// watcher survives it and reports the child's code. (The child counts the SIGINTs it gets and
// exits with that count. Watch does not send a terminal's SIGINT again, but a second one
// sent at once would usually merge with the first while pending, so this test cannot prove
// that part.)
TEST_F(WatchTest, CtrlCOnATerminalReachesTheChildAndWatchReportsItsCode) {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) GTEST_SKIP() << python << " is not installed";
  int master = -1;
  pid_t watch = forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(watch, 0);
  if (watch == 0) {
    setenv("GPUFEED_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    execl(WATCH_DRIVER_PATH, WATCH_DRIVER_PATH, "watch", "--interval", "0.1", "--", python, "-c",
          "import signal, sys, time\n"
          "count = [0]\n"
          "def on_int(*_): count[0] += 1\n"
          "signal.signal(signal.SIGINT, on_int)\n"
          "print('READY', flush=True)\n"
          "end = time.time() + 1.5\n"
          "while time.time() < end: time.sleep(0.05)\n"
          "sys.exit(count[0])\n",
          nullptr);
    _exit(200);
  }
  std::string seen;
  char buffer[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (seen.find("READY") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    ssize_t n = read(master, buffer, sizeof(buffer));
    if (n <= 0) break;
    seen.append(buffer, n);
  }
  ASSERT_NE(seen.find("READY"), std::string::npos) << seen;
  ASSERT_EQ(write(master, "\x03", 1), 1);  // the terminal's interrupt character
  // Drain the pty so the watcher never blocks writing its live line.
  std::thread drain([&] {
    ssize_t n;
    while ((n = read(master, buffer, sizeof(buffer))) > 0) seen.append(buffer, n);
  });
  int code = Wait(watch);
  drain.join();  // ends with EIO once the watcher and its child have closed the terminal
  close(master);
  EXPECT_EQ(code, 1) << seen;
  EXPECT_THAT(seen, HasSubstr("exited with code 1"));
}

TEST_F(WatchTest, AttachesToAPidUntilItExits) {
  pid_t target = fork();
  if (target == 0) {
    execlp("sleep", "sleep", "0.6", nullptr);
    _exit(127);
  }
  // The target stays a zombie (ours to reap) once done: watch must treat that as exited.
  EXPECT_EQ(Run({"--interval", "0.1", "--pid", std::to_string(target)}), 0);
  waitpid(target, nullptr, 0);
  std::string err = Stderr();
  EXPECT_THAT(err, HasSubstr("PID " + std::to_string(target) + " exited after"));
  EXPECT_THAT(err, HasSubstr("process_cpu"));
}

// One line per process of the tree, children included, each with its own CPU and
// RSS from /proc and, per GPU, its SM share and memory from NVML's per-process queries (the
// fake NVML answers for the children's pids, read from the files they write).
class WatchProcessesTest : public WatchTest {
 protected:
  void SetUp() override {
    std::ofstream(dir_.File("nvml.txt"))
        << "process 0 file:" << dir_.File("idle.pid") << " 1073741824\n"
        << "process 0 file:" << dir_.File("busy.pid") << " 2147483648\n"
        << "process_util 0 file:" << dir_.File("busy.pid") << " 60\n";
    env_ = {{"GPUFEED_NVML_LIBRARY", FAKE_NVML_PATH},
            {"GPUFEED_FAKE_NVML_SCRIPT", dir_.File("nvml.txt")}};
  }
  // A shell (the tree's root) with two children: one asleep, one spinning a core.
  std::string Script(double seconds) {
    return fmt::format(
        "echo $$ > {0}/root.pid; sleep {1} & echo $! > {0}/idle.pid; "
        "sh -c 'while :; do :; done' & echo $! > {0}/busy.pid; sleep {1}; kill $!; wait",
        dir_.path(), seconds);
  }
  pid_t PidIn(const std::string& name) { return std::stoi(ReadFile(dir_.File(name))); }
  // Every JSON line of `path`: per sample, the tree's processes by pid.
  std::vector<std::map<pid_t, nlohmann::json>> Processes(const std::string& path) {
    std::vector<std::map<pid_t, nlohmann::json>> samples;
    std::istringstream lines(ReadFile(path));
    std::string line;
    while (std::getline(lines, line)) {
      const auto j = nlohmann::json::parse(line);
      std::map<pid_t, nlohmann::json> by_pid;
      for (const auto& p : j["host"]["processes"]) by_pid[p["pid"].get<pid_t>()] = p;
      for (const auto& g : j["gpus"]) {
        for (const auto& p : g["processes"]) by_pid[p["pid"].get<pid_t>()]["gpu"] = p;
      }
      samples.push_back(std::move(by_pid));
    }
    return samples;
  }
  // The figures of each process across the samples that list all three.
  void ExpectPerProcessFigures(const std::string& jsonl) {
    const pid_t root = PidIn("root.pid"), idle = PidIn("idle.pid"), busy = PidIn("busy.pid");
    const std::string err = Stderr();
    EXPECT_THAT(err, HasSubstr(fmt::format("pid {:<7} sh", root)));
    EXPECT_THAT(err, HasSubstr(fmt::format("pid {:<7} sleep", idle)));
    EXPECT_THAT(err, ::testing::ContainsRegex(
                         fmt::format("pid {:<7} sh .*RSS .* \\| GPU0 SM 60% VRAM 2.0 GiB", busy)));
    EXPECT_THAT(err, ::testing::ContainsRegex(
                         fmt::format("pid {:<7} sleep .*\\| GPU0 SM 0% VRAM 1.0 GiB", idle)));
    EXPECT_THAT(err, ::testing::ContainsRegex(fmt::format("pid {:<7} sh .*\\| GPU -", root)));
    int complete = 0;
    double busy_max = 0, idle_max = 0;
    for (const auto& sample : Processes(jsonl)) {
      if (!sample.count(root) || !sample.count(idle) || !sample.count(busy)) continue;
      ++complete;
      EXPECT_EQ(sample.at(idle)["ppid"].get<pid_t>(), root);
      EXPECT_GT(sample.at(busy)["rss_bytes"].get<uint64_t>(), 0u);
      EXPECT_EQ(sample.at(busy)["gpu"]["memory_bytes"].get<uint64_t>(), uint64_t{2} << 30);
      EXPECT_EQ(sample.at(idle)["gpu"]["memory_bytes"].get<uint64_t>(), uint64_t{1} << 30);
      EXPECT_DOUBLE_EQ(sample.at(busy)["gpu"]["sm_utilization_ratio"].get<double>(), 0.6);
      EXPECT_FALSE(sample.at(root).contains("gpu"));
      if (!sample.at(busy)["cpu_cores"].is_null()) {
        busy_max = std::max(busy_max, sample.at(busy)["cpu_cores"].get<double>());
        idle_max = std::max(idle_max, sample.at(idle)["cpu_cores"].get<double>());
      }
    }
    EXPECT_GE(complete, 2);
    // The spinning child shows its own CPU, the sleeping one next to none (loose: the machine
    // may be loaded, but a spinning shell gets far more than a sleep's few ticks).
    EXPECT_GT(busy_max, 0.1);
    EXPECT_LT(idle_max, busy_max);
  }
};

TEST_F(WatchProcessesTest, ACommandsTreeGetsOneLinePerProcess) {
  const std::string jsonl = dir_.File("watch.jsonl");
  EXPECT_EQ(Run({"--interval", "0.2", "--jsonl", jsonl, "--", "sh", "-c", Script(1.2)}), 0);
  ExpectPerProcessFigures(jsonl);
}

TEST_F(WatchProcessesTest, AnAttachedTreeGetsOneLinePerProcess) {
  pid_t target = fork();
  if (target == 0) {
    execlp("sh", "sh", "-c", Script(1.2).c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 500 && access(dir_.File("busy.pid").c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string jsonl = dir_.File("watch.jsonl");
  EXPECT_EQ(Run({"--interval", "0.2", "--jsonl", jsonl, "--pid", std::to_string(target)}), 0);
  waitpid(target, nullptr, 0);
  ExpectPerProcessFigures(jsonl);
}

TEST_F(WatchProcessesTest, NoProcessesKeepsTheSingleStatusLine) {
  EXPECT_EQ(Run({"--interval", "0.2", "--no-processes", "--", "sh", "-c", "sleep 0.5"}), 0);
  EXPECT_THAT(Stderr(), Not(HasSubstr("  pid ")));
}

TEST_F(WatchTest, PidAndCommandTogetherOrNeitherAreUsageErrors) {
  EXPECT_NE(Run({}), 0);
  EXPECT_THAT(Stderr(), HasSubstr("--pid PID or -- CMD"));
  EXPECT_NE(Run({"--pid", "1", "--", "true"}), 0);
  EXPECT_NE(Run({"--interval", "0.01", "--", "true"}), 0);
  EXPECT_THAT(Stderr(), Not(HasSubstr("exited with code")));
}

}  // namespace
}  // namespace gpufeed
