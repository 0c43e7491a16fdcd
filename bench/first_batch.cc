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
#include <string>

#include "core/host_memory_pool.h"
#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
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
  CLI11_PARSE(app, argc, argv);

  for (int round = 0; round < 2; ++round) {
    const auto t0 = Clock::now();
    gpufeed::CachedLoaderOptions options;
    options.loader.batch_size = batch;
    options.loader.workers = workers;
    options.device = "cpu";
    options.cache.tier = gpufeed::ParseCacheTier(cache);
    options.cache.verbose = false;
    gpufeed::CachedLoader opened = gpufeed::OpenCachedLoader(gpufeed::OpenPath(path, {}), options);
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
