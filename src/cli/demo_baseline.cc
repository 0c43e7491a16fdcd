#include "cli/demo_baseline.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gpufeed::cli {
namespace {

// The user's pattern, as the README's "before" shows it: h5py opened lazily in each worker,
// one read per sample, default collate. Prints "progress SAMPLES SECONDS" per batch and one
// JSON object at the end ({"missing": ...} when torch or h5py is not importable).
constexpr const char* kScript = R"PY(
import json, sys, time
try:
    import h5py, torch
    from torch.utils.data import DataLoader, Dataset
except Exception as e:
    print(json.dumps({"missing": f"{type(e).__name__}: {e}"}), flush=True)
    sys.exit(0)
path, seconds, batch, step_ms, workers = (sys.argv[1], float(sys.argv[2]), int(sys.argv[3]),
                                          float(sys.argv[4]), int(sys.argv[5]))

class H5Samples(Dataset):
    def __init__(self, path):
        self.path, self.file = path, None
        with h5py.File(path, "r") as f:
            self.n = len(f["label"])
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return torch.from_numpy(self.file["mel"][i]), int(self.file["label"][i])

torch.set_num_threads(1)
loader = DataLoader(H5Samples(path), batch_size=batch, shuffle=True, num_workers=workers)
start = time.perf_counter()
first, samples, steps = None, 0, 0
it = iter(loader)
for mel, label in it:
    if first is None:
        first = time.perf_counter() - start
    samples += len(label)
    time.sleep(step_ms / 1000.0)  # the simulated GPU step
    steps += 1
    elapsed = time.perf_counter() - start
    print(f"progress {samples} {elapsed:.3f}", flush=True)
    if elapsed >= seconds:
        break
elapsed = time.perf_counter() - start
after_first = elapsed - (first if first is not None else elapsed)
print(json.dumps({
    "samples": samples, "seconds": elapsed, "first_batch_s": first or 0.0,
    "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
    "gpu_busy_fraction": steps * step_ms / 1000.0 / after_first if after_first > 0 else 0.0,
}), flush=True)
del it
)PY";

// Time allowed beyond `seconds` for importing torch and starting the workers on a loaded
// machine, and for the first batch to arrive.
constexpr double kGraceSeconds = 90;

// The child that runs the script: its pid, and the read end of the pipe that takes its
// stdout and stderr.
struct ScriptChild {
  pid_t pid = -1;
  int out_fd = -1;
};

// Starts the script under `python`; nullopt, with `why_not` set, when the pipe or the fork
// fails.
std::optional<ScriptChild> StartScript(const std::string& python, const BaselineConfig& c,
                                       std::string* why_not) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *why_not = fmt::format("cannot make a pipe: {}", std::strerror(errno));
    return std::nullopt;
  }
  const std::vector<std::string> args = {python,
                                         "-c",
                                         kScript,
                                         c.path,
                                         fmt::format("{}", c.seconds),
                                         fmt::format("{}", c.batch_size),
                                         fmt::format("{}", c.step_ms),
                                         fmt::format("{}", c.workers)};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    *why_not = fmt::format("cannot fork: {}", std::strerror(errno));
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  ::close(fds[1]);
  return ScriptChild{.pid = pid, .out_fd = fds[0]};
}

// What the script left once it ended.
struct ScriptOutput {
  std::string last_json;  // its result: the last line that is a JSON object
  std::string other;      // the last other line (a traceback's last line names the error)
  bool killed = false;    // it overran its time and was stopped
  int wait_status = 0;    // as waitpid reports it
};

// One line of the script's output: a progress report, its result, or anything else.
void TakeLine(const std::string& line, ScriptOutput& output,
              const std::function<void(int64_t, double)>& on_progress) {
  long long samples = 0;
  double seconds = 0;
  if (std::sscanf(line.c_str(), "progress %lld %lf", &samples, &seconds) == 2) {
    if (on_progress) on_progress(samples, seconds);
  } else if (!line.empty() && line[0] == '{') {
    output.last_json = line;
  } else if (!line.empty()) {
    output.other = line;
  }
}

// Reads the child's output line by line until it closes it, or kills the child when
// `limit_seconds` pass first; then reaps it.
ScriptOutput WaitForScript(const ScriptChild& child, double limit_seconds,
                           const std::function<void(int64_t, double)>& on_progress) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(limit_seconds);
  ScriptOutput output;
  std::string pending;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(child.pid, SIGKILL);
      output.killed = true;
      break;
    }
    pollfd p{child.out_fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(child.out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      TakeLine(line, output, on_progress);
    }
  }
  ::close(child.out_fd);
  while (waitpid(child.pid, &output.wait_status, 0) < 0 && errno == EINTR) {
  }
  return output;
}

// The figures the script printed, or why there are none.
void ReadScriptResult(const std::string& python, const BaselineConfig& c,
                      const ScriptOutput& output, BaselineResult& result) {
  if (output.killed) {
    result.why_not = fmt::format("{} did not finish within {:.0f} s and was stopped", python,
                                 c.seconds + kGraceSeconds);
    return;
  }
  const int status = output.wait_status;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && output.last_json.empty()) {
    result.why_not = fmt::format("no {}", python);
    return;
  }
  if (output.last_json.empty()) {
    result.why_not =
        fmt::format("{} failed: {}", python, output.other.empty() ? "no output" : output.other);
    return;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(output.last_json);
    if (j.contains("missing")) {
      result.why_not =
          fmt::format("{} lacks torch or h5py ({})", python, j["missing"].get<std::string>());
      return;
    }
    result.samples = j.at("samples").get<int64_t>();
    result.seconds = j.at("seconds").get<double>();
    result.first_batch_s = j.at("first_batch_s").get<double>();
    result.samples_per_s = j.at("samples_per_s").get<double>();
    result.gpu_busy_fraction = j.at("gpu_busy_fraction").get<double>();
    result.ran = true;
  } catch (const nlohmann::json::exception& e) {
    result.why_not = fmt::format("{} printed an unreadable result: {}", python, e.what());
  }
}

// Runs the script under `python`; result.why_not says what went wrong when !result.ran.
BaselineResult RunWith(const std::string& python, const BaselineConfig& c,
                       const std::function<void(int64_t, double)>& on_progress) {
  BaselineResult result;
  result.python = python;
  const std::optional<ScriptChild> child = StartScript(python, c, &result.why_not);
  if (!child) return result;
  const ScriptOutput output = WaitForScript(*child, c.seconds + kGraceSeconds, on_progress);
  ReadScriptResult(python, c, output, result);
  return result;
}

}  // namespace

BaselineResult RunDataLoaderBaseline(const BaselineConfig& config,
                                     const std::function<void(int64_t, double)>& on_progress) {
  std::vector<std::string> candidates;
  if (const char* given = std::getenv("GPUFEED_PYTHON"); given != nullptr && *given != '\0') {
    candidates.push_back(given);
  } else {
    // Debian's torch and h5py live under /usr/bin/python3; another python3 may come first on
    // PATH.
    if (::access("/usr/bin/python3", X_OK) == 0) candidates.push_back("/usr/bin/python3");
    candidates.push_back("python3");
  }
  BaselineResult result;
  std::string why;
  for (const std::string& python : candidates) {
    result = RunWith(python, config, on_progress);
    if (result.ran) return result;
    why += (why.empty() ? "" : "; ") + result.why_not;
  }
  result.why_not = why;
  return result;
}

}  // namespace gpufeed::cli
