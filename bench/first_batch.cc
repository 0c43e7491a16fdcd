// first_batch: how long a new process takes from nothing to its first batch, with the data
// set already in the shared-memory cache (built by an earlier run: this run says whether it
// found it or built it), and how long a second loader in the same process takes (it reuses
// the first one's batch buffers from the process-wide pool).
//
//   bench_first_batch [--path ~/.cache/gpufeed/demo-mel] [--batch 8192] [--workers 2]
//                     [--cache shm]
//
// Printed per loader: open (cache lookup and mapping), construct (the Loader: its first
// batch's buffer), first batch (the first Next()), and their sum. Run it several times in a
// row, the first run included, to see a cold process each time.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache/shm/shm_open.h"
#include "core/host_memory_pool.h"
#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/open_loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Where a first batch's time goes, each phase alone on this thread: a fresh batch buffer
// faulted in (HostMemoryPool's first touch), the shm source's verified gather of one shuffled
// batch into a buffer already touched (first from a mapping new to this process, then again
// with new rows), and a plain memcpy gather of the same rows from the same mapping (no check)
// for comparison. Needs the shm cache warm (the loaders below build it when it is not).
void PrintPhases(const std::string& path, int64_t batch) {
  std::shared_ptr<gpufeed::Source> base = gpufeed::OpenPath(path, {});
  gpufeed::ShmOpenOptions open_options;
  open_options.verbose = false;
  auto t0 = Clock::now();
  gpufeed::ShmOpenResult opened = gpufeed::OpenShmCache(base, open_options);
  const double open_s = Since(t0);
  if (!opened.source || opened.built) {
    fmt::print("phases: skipped (the shm cache was not warm)\n");
    return;
  }
  const gpufeed::Schema& schema = base->schema();
  const int64_t n = base->size();
  batch = std::min(batch, n);
  gpufeed::BatchView view;
  view.rows = batch;
  size_t bytes = 0;
  std::vector<size_t> offsets;
  for (const auto& f : schema.fields) {
    offsets.push_back(bytes);
    bytes += f.SampleBytes() * static_cast<size_t>(batch);
  }
  t0 = Clock::now();
  auto* buffer = static_cast<std::byte*>(gpufeed::HostMemoryPool::Instance().Take(bytes));
  const double touch_s = Since(t0);
  for (size_t f = 0; f < offsets.size(); ++f) view.fields.push_back(buffer + offsets[f]);
  std::mt19937_64 rng(7);
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  std::shuffle(all.begin(), all.end(), rng);
  auto state = opened.source->NewWorkerState();
  double read_s[2];
  for (int r = 0; r < 2; ++r) {
    std::span<const int64_t> indices(all.data() + r * batch, static_cast<size_t>(batch));
    t0 = Clock::now();
    opened.source->Read(indices, view, state.get());
    read_s[r] = Since(t0);
  }
  // The same first rows again: pages mapped now, a gather with nothing left to fault.
  std::span<const int64_t> again(all.data(), static_cast<size_t>(batch));
  t0 = Clock::now();
  opened.source->Read(again, view, state.get());
  const double warm_s = Since(t0);
  fmt::print(
      "phases ({} rows, {:.1f} MB): open shm {:.3f} s  fresh buffer first touch {:.3f} s  "
      "verified gather: new mapping {:.3f} s, new rows {:.3f} s, same rows again {:.3f} s\n",
      batch, static_cast<double>(bytes) / 1e6, open_s, touch_s, read_s[0], read_s[1], warm_s);
  gpufeed::HostMemoryPool::Instance().Give(buffer);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Time to the first batch of a new process with a warm cache");
  std::string path = std::string(getenv("HOME") ? getenv("HOME") : "") + "/.cache/gpufeed/demo-mel";
  int64_t batch = 8192;
  int workers = 2;
  std::string cache = "shm";
  app.add_option("--path", path, "NumPy folder or HDF5 file");
  app.add_option("--batch", batch, "Batch size");
  app.add_option("--workers", workers, "Loader workers");
  app.add_option("--cache", cache, "Cache tier: shm, ram, none, auto");
  bool phases = false;
  app.add_flag("--phases", phases,
               "First print where a first batch's time goes, phase by phase (shm cache warm)");
  CLI11_PARSE(app, argc, argv);
  if (phases) PrintPhases(path, batch);

  for (int round = 0; round < 2; ++round) {
    const auto t0 = Clock::now();
    gpufeed::LoaderRecipe recipe;
    recipe.source = gpufeed::OpenPath(path, {});
    recipe.loader.batch_size = batch;
    recipe.loader.workers = workers;
    recipe.device = "cpu";
    recipe.cache.tier = gpufeed::ParseCacheTier(cache);
    recipe.cache.verbose = false;
    gpufeed::OpenedLoader opened = gpufeed::OpenLoader(recipe);
    const double open_s = opened.cache.open_seconds;
    const double construct_s = Since(t0) - open_s;
    const auto t1 = Clock::now();
    auto first = opened.loader->Next();
    const double first_s = Since(t1);
    const auto pool = gpufeed::HostMemoryPool::Instance().counters();
    fmt::print(
        "loader {} ({}): open {:.3f} s  construct {:.3f} s  first batch {:.3f} s  total "
        "{:.3f} s  (cache {}{}; pool: {} fresh, {} reused buffers)\n",
        round + 1, round == 0 ? "new process" : "same process", open_s, construct_s, first_s,
        Since(t0), gpufeed::CacheTierName(opened.cache.tier),
        opened.cache.tier == gpufeed::CacheTier::kShm
            ? (opened.cache.built ? ", built now" : ", found warm")
            : "",
        pool.taken_fresh, pool.taken_kept);
  }
  return 0;
}
