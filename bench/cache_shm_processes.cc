// cache_shm_processes: the shared-memory cache across processes, measured with real
// processes (this program re-executed as children).
//
//   bench_cache_shm_processes first-batch [--path DIR]  (default: the `gpufeed demo` set)
//     1. removes the set's cache; a first process opens it with cache 'shm' (it builds the
//        file) and takes one batch; 2. a second process does the same over the warm cache;
//     3. a third streams without a cache, for reference. Each child's time to first batch is
//        counted from the moment the parent spawned it.
//   bench_cache_shm_processes pss [--path DIR] [--processes 4]
//     builds the cache in one child, then N children run one epoch each over it at once;
//     while all are alive the parent sums their PSS (/proc/PID/smaps_rollup), adds the cache
//     file in /dev/shm (tmpfs memory whether mapped or not; readers map it, and what of it
//     is mapped is taken out of their PSS, so nothing counts twice) and compares that with
//     the data set's size.
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"

extern char** environ;

namespace {

int64_t RealtimeNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string DemoPath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return fmt::format("{}/gpufeed/demo-mel", xdg);
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.cache/gpufeed/demo-mel", home != nullptr ? home : "/tmp");
}

struct ChildArgs {
  std::string path;
  std::string tier = "shm";
  std::string shm_dir = gpufeed::kShmRoot;
  int64_t spawned_ns = 0;
  bool epoch = false;
  bool barrier = false;  // after the epoch: write to fd 3, wait for EOF on fd 4
  std::string result;    // file the child writes its figures to
};

// One training process: open (cached), take the first batch, optionally run the epoch.
int RunChild(const ChildArgs& a) {
  gpufeed::CacheInfo info;
  auto source = gpufeed::OpenCached(
      gpufeed::OpenPath(a.path, {}),
      {.tier = gpufeed::ParseCacheTier(a.tier), .shm_dir = a.shm_dir, .verbose = false}, &info);
  gpufeed::LoaderOptions options;
  options.batch_size = 512;
  options.workers = 2;
  gpufeed::Loader loader(source, options);
  auto batch = loader.Next();
  const double first_batch_s = static_cast<double>(RealtimeNs() - a.spawned_ns) / 1e9;
  batch.reset();
  double epoch_s = 0;
  if (a.epoch) {
    const auto start = std::chrono::steady_clock::now();
    while (loader.Next()) {
    }
    epoch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::ofstream(a.result) << fmt::format("{} {} {:.6f} {:.6f} {:.6f} {}\n",
                                         gpufeed::CacheTierName(info.tier), info.built ? 1 : 0,
                                         info.open_seconds, first_batch_s, epoch_s, info.bytes);
  if (a.barrier) {
    char c = 'r';
    if (write(3, &c, 1) != 1) return 1;
    while (read(4, &c, 1) > 0) {
    }
  }
  return 0;
}

struct ChildResult {
  std::string tier;
  bool built = false;
  double open_s = 0, first_batch_s = 0, epoch_s = 0;
  uint64_t bytes = 0;
};

pid_t Spawn(const ChildArgs& a, int ready_fd = -1, int go_fd = -1) {
  std::vector<std::string> args = {"/proc/self/exe", "child",        a.path,
                                   "--tier",         a.tier,         "--shm-dir",
                                   a.shm_dir,        "--spawned-ns", std::to_string(RealtimeNs()),
                                   "--result",       a.result};
  if (a.epoch) args.push_back("--epoch");
  if (a.barrier) args.push_back("--barrier");
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (ready_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, ready_fd, 3);
    posix_spawn_file_actions_adddup2(&actions, go_fd, 4);
  }
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    throw gpufeed::Error(gpufeed::ErrorCode::kIo, "posix_spawn failed");
  }
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

ChildResult Wait(pid_t pid, const std::string& result) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw gpufeed::Error(gpufeed::ErrorCode::kIo, fmt::format("child {} failed", pid));
  }
  ChildResult r;
  int built = 0;
  std::ifstream(result) >> r.tier >> built >> r.open_s >> r.first_batch_s >> r.epoch_s >> r.bytes;
  r.built = built != 0;
  return r;
}

ChildResult RunOne(ChildArgs a) {
  a.spawned_ns = RealtimeNs();
  return Wait(Spawn(a), a.result);
}

// "Pss:" of /proc/PID/smaps_rollup, in bytes; and of the mappings of `file` in smaps.
uint64_t PssBytes(pid_t pid, const std::string& file = "") {
  std::ifstream in(file.empty() ? fmt::format("/proc/{}/smaps_rollup", pid)
                                : fmt::format("/proc/{}/smaps", pid));
  std::string line;
  uint64_t total = 0;
  bool inside = file.empty();
  while (std::getline(in, line)) {
    if (!file.empty() && line.find('-') < line.find(' ') && line.find(':') > 20) {
      inside = line.find(file) != std::string::npos;  // a mapping's first line
      continue;
    }
    if (inside && line.rfind("Pss:", 0) == 0) {
      std::istringstream words(line.substr(4));
      uint64_t kb = 0;
      words >> kb;
      total += kb * 1024;
    }
  }
  return total;
}

int FirstBatch(const std::string& path, const std::string& shm_dir, const std::string& tmp) {
  const std::string key = gpufeed::CacheKey(*gpufeed::OpenPath(path, {}));
  gpufeed::RemoveShmCache(key, shm_dir);
  ChildArgs a{.path = path, .shm_dir = shm_dir, .result = tmp + "/first"};
  const ChildResult first = RunOne(a);
  a.result = tmp + "/second";
  const ChildResult second = RunOne(a);
  a.tier = "none";
  a.result = tmp + "/stream";
  const ChildResult stream = RunOne(a);
  fmt::print("data set: {} ({:.2f} GB)\n", path, static_cast<double>(first.bytes) / 1e9);
  fmt::print("process 1 (builds the shm cache): time to first batch {:.3f} s (build {:.3f} s){}\n",
             first.first_batch_s, first.open_s, first.built ? "" : "  [did NOT build]");
  fmt::print("process 2 (warm shm cache):       time to first batch {:.3f} s (open {:.4f} s)\n",
             second.first_batch_s, second.open_s);
  fmt::print("process 3 (no cache, streaming):  time to first batch {:.3f} s\n",
             stream.first_batch_s);
  fmt::print("warm shm first batch <= 0.2 s: {}\n", second.first_batch_s <= 0.2 ? "yes" : "NO");
  return 0;
}

int Pss(const std::string& path, const std::string& shm_dir, const std::string& tmp,
        int processes) {
  ChildArgs a{.path = path, .shm_dir = shm_dir, .result = tmp + "/build"};
  const ChildResult build = RunOne(a);  // makes sure the cache exists before the group starts
  const std::string key = gpufeed::CacheKey(*gpufeed::OpenPath(path, {}));
  int ready[2], go[2];
  // Close-on-exec: a child holding the write end of `go` would never see its EOF.
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) return 1;
  std::vector<pid_t> pids;
  for (int i = 0; i < processes; ++i) {
    ChildArgs c = a;
    c.epoch = true;
    c.barrier = true;
    c.result = fmt::format("{}/pss-{}", tmp, i);
    c.spawned_ns = RealtimeNs();
    pids.push_back(Spawn(c, ready[1], go[0]));
  }
  close(ready[1]);
  close(go[0]);
  for (int i = 0; i < processes; ++i) {
    char c;
    if (read(ready[0], &c, 1) != 1) return 1;
  }
  uint64_t total = 0, shm_total = 0;
  std::vector<uint64_t> each;
  for (pid_t pid : pids) {
    each.push_back(PssBytes(pid));
    total += each.back();
    shm_total += PssBytes(pid, "gpufeed-" + key);
  }
  close(go[1]);
  double epoch_s = 0;
  for (int i = 0; i < processes; ++i) {
    epoch_s = std::max(epoch_s, Wait(pids[i], fmt::format("{}/pss-{}", tmp, i)).epoch_s);
  }
  const double data = static_cast<double>(build.bytes);
  // The cache file: ShmCachePath's layout (<dir>/gpufeed-user-<uid>/gpufeed-<key>).
  struct stat st {};
  const std::string file = fmt::format("{}/gpufeed-user-{}/gpufeed-{}", shm_dir, getuid(), key);
  const uint64_t file_bytes = stat(file.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  const uint64_t memory = total - shm_total + file_bytes;
  fmt::print("data set: {} ({:.2f} GB), cache {} ({})\n", path, data / 1e9, key,
             build.built ? "built by the first child" : "already built");
  for (int i = 0; i < processes; ++i) {
    fmt::print("process {}: PSS {:.0f} MB\n", i + 1, static_cast<double>(each[i]) / 1e6);
  }
  fmt::print(
      "{} processes, one epoch each at once (slowest {:.2f} s): summed PSS {:.0f} MB "
      "(of which the shm mapping {:.0f} MB) + the cache file in /dev/shm {:.0f} MB "
      "(counted once) = {:.0f} MB = {:.2f}x the data set (target <= 1.3x)\n",
      processes, epoch_s, static_cast<double>(total) / 1e6, static_cast<double>(shm_total) / 1e6,
      static_cast<double>(file_bytes) / 1e6, static_cast<double>(memory) / 1e6,
      static_cast<double>(memory) / data);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Shared-memory cache across processes: time to first batch and summed PSS");
  app.require_subcommand(1);
  std::string path = DemoPath();
  std::string shm_dir = gpufeed::kShmRoot;
  int processes = 4;
  ChildArgs child;
  auto* fb = app.add_subcommand("first-batch", "Time to first batch: building vs warm vs none");
  auto* pss = app.add_subcommand("pss", "Summed PSS of N processes over one cache");
  for (auto* sub : {fb, pss}) {
    sub->add_option("--path", path, "NumPy folder or HDF5 file (default: the demo set)");
    sub->add_option("--shm-dir", shm_dir, "Shared-memory folder");
  }
  pss->add_option("--processes", processes, "Concurrent processes");
  auto* ch = app.add_subcommand("child", "(internal) one measured process");
  ch->add_option("path", child.path)->required();
  ch->add_option("--tier", child.tier);
  ch->add_option("--shm-dir", child.shm_dir);
  ch->add_option("--spawned-ns", child.spawned_ns);
  ch->add_option("--result", child.result);
  ch->add_flag("--epoch", child.epoch);
  ch->add_flag("--barrier", child.barrier);
  CLI11_PARSE(app, argc, argv);
  try {
    if (ch->parsed()) return RunChild(child);
    char tmpl[] = "/tmp/gpufeed-bench-cache-XXXXXX";
    const std::string tmp = mkdtemp(tmpl);
    const int rc =
        fb->parsed() ? FirstBatch(path, shm_dir, tmp) : Pss(path, shm_dir, tmp, processes);
    std::system(fmt::format("rm -rf {}", tmp).c_str());
    return rc;
  } catch (const gpufeed::Error& e) {
    std::fprintf(stderr, "bench_cache_shm_processes: %s\n", e.what());
    return 1;
  }
}
