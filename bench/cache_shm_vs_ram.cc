// cache_shm_vs_ram: shuffled epochs from the RAM tier and from the shared-memory tier over the
// same data set in the same run, then from the shm tier in a new process.
//
//   bench_cache_shm_vs_ram [--path DIR] [--mb 800] [--batch 8192] [--workers 2] [--epochs 5]
//                          [--shm-dir DIR]
//
// Without --path the data set is synthetic (mel float32[1,64,32] + label int64, like the demo
// set) of about --mb megabytes. The RAM cache is preloaded and the shm cache built (in a
// scratch root under --shm-dir, removed at the end) before anything is timed. Epochs then
// alternate, RAM then shm, so both meet the same load on a shared machine; the first epoch of
// each is left out (it pays the first touch of every page). Printed: each epoch's samples/s,
// the median of the later epochs of each tier and their ratio; then the same from a child
// process (this program re-executed) that finds the cache published and maps it, against a
// RAM copy of its own, alternating likewise. Also printed:
// the gather rates cache='auto' decides from (ProbeGatherRates) for this set.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache/gather_probe.h"
#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string path;
  int64_t mb = 800;
  int64_t batch = 8192;
  int workers = 2;
  int epochs = 5;
  std::string shm_dir = "/dev/shm";
  std::string child_root;  // set in the child: the scratch root the parent built in
};

std::shared_ptr<gpufeed::Source> OpenBase(const Args& a) {
  if (!a.path.empty()) return gpufeed::OpenPath(a.path, {});
  const gpufeed::Schema schema = gpufeed::ParseSchema("mel:float32[1,64,32],label:int64[]");
  return gpufeed::OpenSynthetic(schema, a.mb * 1000000 / static_cast<int64_t>(schema.SampleBytes()),
                                1);
}

std::unique_ptr<gpufeed::Loader> MakeLoader(std::shared_ptr<gpufeed::Source> source,
                                            const Args& a) {
  gpufeed::LoaderOptions options;
  options.batch_size = a.batch;
  options.workers = a.workers;
  options.rank = 0;
  options.world_size = 1;
  return std::make_unique<gpufeed::Loader>(std::move(source), options);
}

// One epoch's samples per second.
double Epoch(gpufeed::Loader& loader) {
  int64_t samples = 0;
  const auto start = Clock::now();
  while (auto b = loader.Next()) samples += b->size();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(samples) / s;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

gpufeed::CacheOptions ShmOptions(const std::string& root, int workers) {
  return {.tier = gpufeed::CacheTier::kShm, .shm_dir = root, .threads = workers, .verbose = false};
}

// Alternating epochs of the two loaders, RAM then shm, each printed; the medians of the
// epochs after the first, {RAM, shm}.
std::pair<double, double> Alternate(gpufeed::Loader& ram, gpufeed::Loader& shm, int epochs,
                                    const std::string& who) {
  std::vector<double> ram_later;
  std::vector<double> shm_later;
  for (int e = 0; e < epochs; ++e) {
    const double r = Epoch(ram);
    const double s = Epoch(shm);
    fmt::print(stderr, "{}epoch {}: RAM {:.0f} k samples/s, shm {:.0f} k samples/s{}\n", who, e,
               r / 1e3, s / 1e3, e == 0 ? " (first epoch: left out)" : "");
    if (e > 0) {
      ram_later.push_back(r);
      shm_later.push_back(s);
    }
  }
  return {Median(ram_later), Median(shm_later)};
}

// The child: open the published cache (and a RAM copy of its own, to compare in the same
// conditions), alternate epochs, print the later epochs' medians "RAM shm" on stdout.
int RunChild(const Args& a) {
  gpufeed::CacheInfo info;
  auto base = OpenBase(a);
  auto shm = gpufeed::OpenCached(base, ShmOptions(a.child_root, a.workers), &info);
  if (info.tier != gpufeed::CacheTier::kShm || info.built) {
    fmt::print(stderr, "child: expected to find the published cache, got {}\n", info.ToString());
    return 1;
  }
  auto ram = gpufeed::OpenCached(
      base,
      {.tier = gpufeed::CacheTier::kRam, .preload = true, .threads = a.workers, .verbose = false});
  auto ram_loader = MakeLoader(ram, a);
  auto shm_loader = MakeLoader(shm, a);
  const auto [ram_rate, shm_rate] = Alternate(*ram_loader, *shm_loader, a.epochs, "new process, ");
  fmt::print("{:.1f} {:.1f}\n", ram_rate, shm_rate);
  return 0;
}

// {RAM, shm} later-epoch medians measured by a new process; zeros when it failed.
std::pair<double, double> RunChildProcess(const Args& a, const std::string& root) {
  std::string command =
      fmt::format("/proc/{}/exe --child-root '{}' --mb {} --batch {} --workers {} --epochs {}",
                  getpid(), root, a.mb, a.batch, a.workers, a.epochs);
  if (!a.path.empty()) command += fmt::format(" --path '{}'", a.path);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {0, 0};
  double ram = 0;
  double shm = 0;
  if (std::fscanf(pipe, "%lf %lf", &ram, &shm) != 2) ram = shm = 0;
  pclose(pipe);
  return {ram, shm};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("RAM tier vs shared-memory tier: later epochs, same set, same run");
  Args a;
  app.add_option("--path", a.path, "NumPy folder or HDF5 file (default: synthetic)");
  app.add_option("--mb", a.mb, "Synthetic data set size in MB");
  app.add_option("--batch", a.batch, "Batch size");
  app.add_option("--workers", a.workers, "Loader workers");
  app.add_option("--epochs", a.epochs, "Epochs per tier (the first is left out)");
  app.add_option("--shm-dir", a.shm_dir, "Where the scratch shm root is made");
  app.add_option("--child-root", a.child_root, "(internal) run as the new-process reader");
  CLI11_PARSE(app, argc, argv);
  if (!a.child_root.empty()) return RunChild(a);
  if (a.epochs < 2) {
    fmt::print(stderr, "--epochs must be at least 2 (the first is left out)\n");
    return 2;
  }

  const std::string root = fmt::format("{}/gpufeed-bench-shm-vs-ram-{}", a.shm_dir, getpid());
  std::filesystem::create_directories(root);
  auto base = OpenBase(a);
  gpufeed::CacheInfo ram_info;
  gpufeed::CacheInfo shm_info;
  auto t0 = Clock::now();
  auto ram = gpufeed::OpenCached(
      base,
      {.tier = gpufeed::CacheTier::kRam, .preload = true, .threads = a.workers, .verbose = false},
      &ram_info);
  const double preload_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  auto shm = gpufeed::OpenCached(base, ShmOptions(root, a.workers), &shm_info);
  const double build_s = std::chrono::duration<double>(Clock::now() - t0).count();
  fmt::print("data set: {} ({:.0f} MB, {} samples); RAM preload {:.2f} s, shm build {:.2f} s\n",
             base->Describe(), static_cast<double>(ram_info.bytes) / 1e6, base->size(), preload_s,
             build_s);
  const gpufeed::GatherRates probe = gpufeed::ProbeGatherRates(*base);
  fmt::print("cache='auto' probe: {}; shm / RAM = {:.2f}\n", probe.ToString(),
             probe.shm_bytes_per_s / probe.ram_bytes_per_s);
  fmt::print("batch {}, {} workers, {} epochs per tier, alternating RAM / shm\n", a.batch,
             a.workers, a.epochs);
  std::fflush(stdout);  // before the epochs' lines on stderr
  auto ram_loader = MakeLoader(ram, a);
  auto shm_loader = MakeLoader(shm, a);
  const auto [ram_rate, shm_rate] = Alternate(*ram_loader, *shm_loader, a.epochs, "");
  fmt::print(
      "later epochs (median): RAM {:.0f} k samples/s, shm {:.0f} k samples/s, "
      "shm / RAM = {:.2f}\n",
      ram_rate / 1e3, shm_rate / 1e3, shm_rate / ram_rate);
  ram_loader.reset();
  shm_loader.reset();
  ram.reset();  // the child makes its own RAM copy
  std::fflush(stdout);
  const auto [child_ram, child_shm] = RunChildProcess(a, root);
  fmt::print(
      "new process, later epochs (median): RAM {:.0f} k samples/s, shm {:.0f} k "
      "samples/s, shm / RAM = {:.2f}\n",
      child_ram / 1e3, child_shm / 1e3, child_ram > 0 ? child_shm / child_ram : 0.0);
  shm.reset();
  std::filesystem::remove_all(root);
  return 0;
}
