#include "cli/watch_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/monitor.h"

namespace gpufeed {
namespace {

struct WatchArgs {
  double interval_seconds = 1.0;
  std::string jsonl;
  std::string prometheus;
  pid_t pid = 0;
  bool no_processes = false;
  std::vector<std::string> command;
};

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_interrupted = 0;

// Forwards SIGINT/SIGTERM/SIGHUP to the child. A signal from the terminal (si_code
// SI_KERNEL) already went to the whole foreground process group, child included: sending it
// again would interrupt the child's own Ctrl-C handling (a Python KeyboardInterrupt twice).
void ForwardSignal(int signal_number, siginfo_t* info, void*) {
  g_interrupted = 1;
  pid_t child = g_child;
  if (child > 0 && (info == nullptr || info->si_code != SI_KERNEL)) kill(child, signal_number);
}

class SignalForwarding {
 public:
  explicit SignalForwarding(pid_t child) {
    g_child = child;
    g_interrupted = 0;
    struct sigaction action {};
    action.sa_sigaction = ForwardSignal;
    action.sa_flags = SA_SIGINFO;  // no SA_RESTART: waitpid returns EINTR and loops
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &action, &saved_[i]);
    // A child killed before it runs the command (a forwarded signal) closes the gate pipe:
    // writing to it must fail with EPIPE, not kill the watcher with SIGPIPE. The child was
    // forked before this, so the command keeps the default disposition.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &saved_pipe_);
  }
  ~SignalForwarding() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &saved_[i], nullptr);
    sigaction(SIGPIPE, &saved_pipe_, nullptr);
    g_child = 0;
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> saved_{};
  struct sigaction saved_pipe_ {};
};

MonitorOptions BaseOptions(const WatchArgs& args) {
  MonitorOptions options;
  options.interval = std::chrono::milliseconds(static_cast<int64_t>(args.interval_seconds * 1000));
  options.jsonl_path = args.jsonl;
  options.prometheus_address = args.prometheus;
  options.live_line = stderr;
  options.process_lines = !args.no_processes;
  return options;
}

void PrintEnd(Monitor& monitor, const std::string& how) {
  monitor.Stop();
  std::fprintf(stderr, "gpufeed watch: %s\n%s", how.c_str(), monitor.Summary().ToText().c_str());
}

void AnnounceServer(const Monitor& monitor, const WatchArgs& args) {
  if (monitor.prometheus_port() != 0) {
    std::fprintf(stderr, "gpufeed watch: Prometheus metrics on http://%s/metrics (port %d)\n",
                 args.prometheus.c_str(), monitor.prometheus_port());
  }
}

int Attach(const WatchArgs& args) {
  MonitorOptions options = BaseOptions(args);
  options.pid = args.pid;
  Monitor monitor(std::move(options));  // Error(kNotFound) when there is no such process
  AnnounceServer(monitor, args);
  // Ctrl-C detaches: the process is not ours to interrupt.
  SignalForwarding signals(0);
  auto start = std::chrono::steady_clock::now();
  monitor.Start();
  for (;;) {
    auto latest = monitor.Latest();
    if (latest && latest->host.tree_processes == 0) break;
    if (g_interrupted) {
      PrintEnd(monitor, fmt::format("detached from PID {}", args.pid));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintEnd(monitor, fmt::format("PID {} exited after {:.1f} s", args.pid, seconds));
  return 0;
}

// The child's side of Run: waits at the gate, then execs; a failed exec reports errno.
// Only async-signal-safe calls from fork to exec.
[[noreturn]] void ExecAtGate(const int gate[2], const int report[2], char* const* argv) {
  close(gate[1]);
  close(report[0]);
  char go = 0;
  ssize_t n;
  while ((n = read(gate[0], &go, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) _exit(125);  // the watcher gave up before starting us
  execvp(argv[0], argv);
  int err = errno;
  ssize_t ignored = write(report[1], &err, sizeof(err));
  (void)ignored;
  _exit(err == ENOENT ? 127 : 126);
}

// The shell's exit code for a wait status (128 + signal when killed) and a sentence saying so.
std::pair<int, std::string> DescribeExit(int status, const std::string& name, double seconds) {
  if (WIFEXITED(status)) {
    return {WEXITSTATUS(status), fmt::format("{} exited with code {} after {:.1f} s", name,
                                             WEXITSTATUS(status), seconds)};
  }
  if (WIFSIGNALED(status)) {
    return {128 + WTERMSIG(status),
            fmt::format("{} was killed by signal {} ({}) after {:.1f} s", name, WTERMSIG(status),
                        strsignal(WTERMSIG(status)), seconds)};
  }
  return {0, ""};
}

// fork + exec with two pipes: `gate` holds the child until the monitor is up (so a port in
// use fails before the command ever runs), `report` (close-on-exec) carries errno back when
// exec fails, and closes silently when it succeeds.
int Run(const WatchArgs& args) {
  int gate[2], report[2];
  if (pipe2(gate, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
    throw Error(ErrorCode::kIo, fmt::format("pipe2 failed: {}", std::strerror(errno)));
  }
  std::vector<char*> argv;
  for (const std::string& arg : args.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    throw Error(ErrorCode::kIo, fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (child == 0) ExecAtGate(gate, report, argv.data());
  close(gate[0]);
  close(report[1]);
  auto reap = [child] {
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  };

  // Before anything prints: a signal from now on reaches the child (still at the gate, or
  // running the command) instead of killing the watcher and orphaning the child.
  SignalForwarding signals(child);
  std::unique_ptr<Monitor> monitor;
  try {
    MonitorOptions options = BaseOptions(args);
    options.pid = child;
    monitor = std::make_unique<Monitor>(std::move(options));
    AnnounceServer(*monitor, args);
    monitor->Start();
  } catch (...) {
    close(gate[1]);  // the child exits without running the command
    close(report[0]);
    reap();
    throw;
  }
  auto start = std::chrono::steady_clock::now();
  char go = 1;
  ssize_t ignored = write(gate[1], &go, 1);
  (void)ignored;
  close(gate[1]);

  int exec_errno = 0;
  ssize_t n;
  while ((n = read(report[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n == sizeof(exec_errno)) {
    reap();
    monitor->Stop();
    std::fprintf(stderr, "gpufeed watch: %s: %s\n", args.command[0].c_str(),
                 exec_errno == ENOENT ? "command not found" : std::strerror(exec_errno));
    return exec_errno == ENOENT ? 127 : 126;
  }

  int status = reap();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto [code, how] = DescribeExit(status, args.command[0], seconds);
  PrintEnd(*monitor, how);
  return code;
}

}  // namespace

void RegisterWatchCommand(CLI::App& app) {
  auto args = std::make_shared<WatchArgs>();
  CLI::App* watch = app.add_subcommand(
      "watch",
      "Run (or attach to) a training process and show GPU, VRAM, CPU and RAM live (and one "
      "line per process of its tree: CPU, RSS, GPU SM share and memory), then a summary and "
      "warnings");
  watch->add_option("--interval", args->interval_seconds, "Seconds between samples")
      ->default_val(1.0)
      ->check(CLI::Range(0.1, 3600.0));
  watch->add_option("--jsonl", args->jsonl, "Write one JSON object per sample to FILE");
  watch->add_option("--prometheus", args->prometheus,
                    "Serve Prometheus metrics at http://ADDR:PORT/metrics (ADDR defaults to "
                    "127.0.0.1)");
  watch->add_flag("--no-processes", args->no_processes,
                  "Show only the status line, not one line per process of the tree (CPU, RSS, "
                  "and per GPU its SM share and memory)");
  CLI::Option* pid = watch->add_option("--pid", args->pid, "Attach to a running process")
                         ->check(CLI::PositiveNumber);
  CLI::Option* command =
      watch->add_option("command", args->command, "The command to run, after --");
  pid->excludes(command);
  watch->callback([args] {
    if (args->pid == 0 && args->command.empty()) {
      throw CLI::ValidationError("watch", "give --pid PID or -- CMD ARGS...");
    }
    int code = args->pid != 0 ? Attach(*args) : Run(*args);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed
