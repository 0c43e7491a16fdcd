// Prints how close the autotuner, started from a bad setting (1 worker, prefetch 1), gets
// to the best setting a hand sweep finds, on the same data with a simulated GPU step.
//
//   bench_autotune_sweep DATA [--batch-size 8192] [--step-ms 10] [--batches 16]
//
// DATA: a NumPy folder or an HDF5 file (`bench/hdf5_vs_dataloader.py` makes the synthetic mel segments
// HDF5 set). Each sweep point runs `batches` batches after 2 warm-up batches; the tuned run
// gets 3x as many to find its way, and its last `batches` are measured.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/system/system_memory.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  double samples_per_s = 0;
  int workers = 0;
  int prefetch = 0;
  std::vector<std::string> log;
};

Run Measure(std::shared_ptr<gpufeed::Source> source, gpufeed::LoaderOptions options,
            int warmup, int measured, double step_ms) {
  gpufeed::Loader loader(source, options);
  int64_t samples = 0;
  Clock::time_point start;
  for (int i = 0; i < warmup + measured; ++i) {
    if (i == warmup) {
      start = Clock::now();
      samples = 0;
    }
    auto batch = loader.Next();
    if (!batch) batch = loader.Next();  // next epoch
    samples += batch->size();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return {samples / s, loader.workers(), loader.prefetch(), loader.stats().tuning_log};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Autotuner from a bad start against the best point of a hand sweep");
  std::string path;
  int64_t batch_size = 8192;
  double step_ms = 10;
  int batches = 16;
  int max_workers = gpufeed::UsableCpus();
  app.add_option("data", path, "A NumPy folder or an HDF5 file")->required();
  app.add_option("--batch-size", batch_size)->capture_default_str();
  app.add_option("--step-ms", step_ms, "Simulated GPU step per batch")->capture_default_str();
  app.add_option("--batches", batches, "Measured batches per point")->capture_default_str();
  app.add_option("--max-workers", max_workers)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto source = gpufeed::OpenPath(path, {});
    gpufeed::LoaderOptions base;
    base.batch_size = batch_size;
    base.rank = 0;
    base.world_size = 1;
    fmt::print("{}: batch {}, simulated step {} ms, {} measured batches per point\n",
               source->Describe(), batch_size, step_ms, batches);
    fmt::print("{:>8} {:>9} {:>14}\n", "workers", "prefetch", "samples/s");
    Run best;
    for (int w = 1; w <= max_workers; ++w) {
      for (int p : {1, 2, 4, 8}) {
        gpufeed::LoaderOptions o = base;
        o.workers = w;
        o.prefetch = p;
        const Run r = Measure(source, o, 2, batches, step_ms);
        fmt::print("{:>8} {:>9} {:>14.0f}\n", w, p, r.samples_per_s);
        if (r.samples_per_s > best.samples_per_s) best = r;
      }
    }
    gpufeed::LoaderOptions tuned = base;
    tuned.workers = 1;
    tuned.prefetch = 1;
    tuned.autotune = true;
    tuned.max_workers = max_workers;
    const Run t = Measure(source, tuned, 2 * batches + 2, batches, step_ms);
    fmt::print("\nbest hand-tuned: {:.0f} samples/s at workers {}, prefetch {}\n",
               best.samples_per_s, best.workers, best.prefetch);
    fmt::print("autotuned from workers 1, prefetch 1: {:.0f} samples/s, ended at workers {}, "
               "prefetch {}\n",
               t.samples_per_s, t.workers, t.prefetch);
    for (const auto& line : t.log) fmt::print("  - {}\n", line);
    fmt::print("ratio autotuned / best: {:.2f}\n", t.samples_per_s / best.samples_per_s);
  } catch (const gpufeed::Error& e) {
    fmt::print(stderr, "bench_autotune_sweep: {}\n", e.what());
    return 1;
  }
  return 0;
}
