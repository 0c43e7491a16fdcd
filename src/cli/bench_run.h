// The measurement behind `gpufeed bench` and `gpufeed demo`: drive a Loader for some epochs
// with an optional simulated GPU step, and measure in the same run two ceilings with the same
// number of threads: the memcpy of the same bytes, and the same work without the loader.
// Thread-safety: RunBench runs on the calling thread; the progress callback is called there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpufeed/loader.h"
#include "gpufeed/open_loader.h"

namespace gpufeed::cli {

struct BenchConfig {
  // The loader, its device, transforms, cache and remedies, as OpenLoader assembles them
  // (RunBench gives it the source).
  LoaderRecipe open;
  int epochs = 1;  // Default: 1
  // Default: 0 = run `epochs`. > 0: whole epochs until this many seconds have passed (at
  // least one epoch, at most `epochs`): a run long enough to measure, whatever the speed.
  double seconds = 0;
  // Default: 0 = no simulated step: a sleep on the host. On a CUDA device the step is work
  // on the legacy default stream instead (torch's default; a host function that sleeps,
  // enqueued after the batch's copy, waited for as loss.item() would), so the loader times
  // that stream with events: BenchResult::gpu_busy_fraction_events.
  double step_ms = 0;
  bool measure_ceiling = true;
  bool monitor = true;  // Default: true: sample GPU/CPU/RAM and show them in the progress
  bool doctor = false;  // Default: false: diagnose the run at its end
  // Default: none. Opens the run's source again, as it was opened (a new handle: its own
  // file descriptors and mappings): the same-work ceiling then starts from a fresh opening
  // and pays the first touch of the file (or shm cache) in this process, as the loader's
  // run did. Without it, or when the loader reads something else (a RAM or device cache,
  // packed groups), the same work reads the loader's own source.
  std::function<std::shared_ptr<Source>()> reopen;
};

struct BenchProgress {
  int64_t epoch = 0;
  int epochs = 0;
  int64_t batch = 0;  // batches done in this epoch
  int64_t batches_per_epoch = 0;
  int64_t samples = 0;  // so far, all epochs
  double elapsed_s = 0;
  double seconds = 0;  // BenchConfig::seconds: the run's planned length, when timed
  double samples_per_s = 0;
  double consumer_wait_fraction = 0;
  std::string status_line;  // the monitor's GPU/VRAM/CPU/RAM line, when it runs
};

struct BenchResult {
  LoaderStats stats;
  int epochs = 0;
  int64_t samples = 0;
  int64_t bytes = 0;
  double wall_s = 0;  // first Next() call to the end of the last step
  double samples_per_s = 0;
  double bytes_per_s = 0;
  double time_to_first_batch_s = 0;  // from the first Next() call
  // Constructing the loader (buffers allocated and touched), not opening its cache.
  double setup_s = 0;
  double ceiling_bytes_per_s = 0;  // memcpy of the same bytes, same threads
  double ceiling_samples_per_s = 0;
  double ratio_to_ceiling = 0;
  // The same work without the loader: the same epochs' batches (the same shuffled rows)
  // read by as many threads from the same data (the file or the shm cache) with Source::Read
  // into batch buffers the run faulted in, after the loader's run. 1.0 = the loader adds
  // nothing. same_work_fresh_opening: it read a fresh opening of the source
  // (BenchConfig::reopen), so its first epoch paid this process's first touch of the mapping
  // as the loader's did; false: it read the loader's own source, whose mapping the run had
  // warmed (a first epoch's page-table faults then count against the loader).
  double same_work_samples_per_s = 0;
  double same_work_bytes_per_s = 0;
  double ratio_to_same_work = 0;
  bool same_work_fresh_opening = false;
  // The same work again on the loader's own source, warmed by the run: the yardstick for
  // the epochs after the first (later_ratio_to_same_work).
  double same_work_warm_samples_per_s = 0;
  // Epochs after the first (runs of 2 epochs or more; 0 otherwise): the rate once the
  // process has touched the source and its batch buffers, and its ratio to each ceiling
  // measured on warm memory (the memcpy ceiling, same_work_warm_samples_per_s). first_epoch_s:
  // first Next() to the first epoch's last batch.
  double first_epoch_s = 0;
  double later_samples_per_s = 0;
  double later_ratio_to_ceiling = 0;
  double later_ratio_to_same_work = 0;
  // The simulated GPU's busy share over the epochs after the first (host step); -1 otherwise.
  double later_gpu_busy_fraction = -1;
  // Batch memory the run took fresh from the system (HostMemoryPool: allocated and faulted
  // in, the kernel zeroing every page) and the worker time that cost; 0 when every buffer
  // came back from an earlier loader of the process. The ceilings, measured after, reuse it.
  int64_t fresh_batch_memory_bytes = 0;
  double fresh_batch_memory_s = 0;
  double consumer_wait_fraction = 0;
  double step_ms = 0;
  double gpu_busy_fraction = 0;               // simulated steps over wall time from the first batch
  double gpu_busy_fraction_with_startup = 0;  // ... over wall time from the first Next()
  // ... over the run's last 5 s (all of it when shorter): after what the loader did during
  // the run (stats.actions, stats.tuning_log); -1 without a simulated step.
  double gpu_busy_fraction_final = -1;
  // Measured by events on the consumer stream (LoaderStats::GpuBusyFraction): the GPU's
  // time not spent waiting for batches; -1 when nothing was timed (host device, no step).
  double gpu_busy_fraction_events = -1;
  int64_t peak_rss_bytes = 0;       // VmHWM
  int64_t peak_anon_rss_bytes = 0;  // peak RssAnon sampled per batch: memory not mapped files
  // (prefetch + workers) * batch bytes + 100 MB, plus an HDF5 source's decoded-chunk budget.
  int64_t bound_anon_rss_bytes = 0;
  // An HDF5 source (LoaderStats::source, a cache in front of it or not): over the loader's run,
  // the chunks decoded and the chunk uses the workers' decoded-chunk caches served, and the
  // caches' budget. -1: not HDF5.
  int64_t hdf5_chunks_decoded = -1;
  int64_t hdf5_chunk_cache_hits = -1;
  int64_t hdf5_chunk_cache_bytes = -1;
  std::string source;
  std::string device;
  std::string cache;           // CacheInfo::ToString() when a cache was asked for
  std::string diagnosis_text;  // with BenchConfig::doctor
  std::string diagnosis_json;
  std::string monitor_summary;  // mean, p5, p95 per metric over the run
  // Packed groups (LoaderOptions::groups): groups per epoch, their rate (every group is
  // delivered whole once an epoch), and the loader's fill (rows / batch capacity).
  int64_t groups = 0;
  double groups_per_s = 0;
  double pack_fill = 0;

  std::string ToJson() const;
};

BenchResult RunBench(std::shared_ptr<Source> source, const BenchConfig& config,
                     const std::function<void(const BenchProgress&)>& on_progress);

// Human formatting: "1.23 GB", "612,345".
std::string FormatCount(double count);

}  // namespace gpufeed::cli

namespace gpufeed::cli {

// The human summary of a run: throughput, ceiling, stalls and per-stage times.
std::string FormatBenchReport(const BenchResult& result);
// "epoch 1/2  batch 7/13  612,345 samples/s  wait 1.2%"
std::string FormatProgress(const BenchProgress& progress);

}  // namespace gpufeed::cli
