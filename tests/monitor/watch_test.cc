// `gpufeed watch`, run as a program (tests/monitor/watch_driver.cc): exit codes, signals and
// the clear errors.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

TEST_F(WatchTest, PidAndCommandTogetherOrNeitherAreUsageErrors) {
  EXPECT_NE(Run({}), 0);
  EXPECT_THAT(Stderr(), HasSubstr("--pid PID or -- CMD"));
  EXPECT_NE(Run({"--pid", "1", "--", "true"}), 0);
  EXPECT_NE(Run({"--interval", "0.01", "--", "true"}), 0);
  EXPECT_THAT(Stderr(), Not(HasSubstr("exited with code")));
}

}  // namespace
}  // namespace gpufeed
