#include "cli/bench_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_ceilings.h"
#include "cli/sigint_cancel.h"
#include "cli/simulated_step.h"
#include "core/host_memory_pool.h"
#include "core/log.h"
#include "device/cuda_device.h"
#include "gpufeed/doctor.h"
#include "gpufeed/monitor.h"
#include "pipeline/loader_checks.h"
#include "pipeline/sampler.h"

namespace gpufeed::cli {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A field of /proc/self/status in bytes ("RssAnon", "VmHWM"), or 0.
int64_t StatusBytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t key_len = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, key_len, key) == 0 && line.size() > key_len && line[key_len] == ':') {
      return std::strtoll(line.c_str() + key_len + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// A fresh opening of the data the loader reads, for the same-work ceiling: the source opened
// again, in front of it the shm cache the loader reads (found published: attached, not
// built). nullptr when there is no opener, or the loader reads something a new opening would
// not give (a RAM or device copy, packed groups, images decoded into a cache): then the
// same work reads the loader's own source. The identities must match: the same rows.
std::shared_ptr<Source> ReopenForSameWork(const BenchConfig& config, const OpenedLoader& opened,
                                          const Source& loader_source) {
  if (!config.reopen) return nullptr;
  const CacheTier tier = opened.cache.tier;
  if (tier != CacheTier::kNone && tier != CacheTier::kShm) return nullptr;
  std::shared_ptr<Source> fresh;
  try {
    fresh = config.reopen();
    if (tier == CacheTier::kShm) {
      // The loader's shm cache, found as the loader found it: the recipe's cache alone.
      LoaderRecipe recipe{.source = std::move(fresh),
                          .device = "cpu",
                          .cache = config.open.cache,
                          .cache_only = true};
      recipe.cache.tier = CacheTier::kShm;
      recipe.cache.verbose = false;
      fresh = OpenLoader(std::move(recipe)).source;
    }
  } catch (const Error& e) {
    // The file changed or went since the run opened it, or the shm cache was removed and
    // no longer fits: the same work reads the loader's source (the report says which).
    Log(LogLevel::kWarning,
        fmt::format("bench: the same-work ceiling reads the loader's own source: opening it "
                    "again failed: {}",
                    e.what()));
    return nullptr;
  }
  if (fresh->cache_tier() != loader_source.cache_tier() ||
      fresh->Identity() != loader_source.Identity()) {
    return nullptr;
  }
  return fresh;
}

// What RunBench's steps hand each other: the run's monitor and simulated GPU, its clock's
// marks, and the counters read before the run that the figures after it subtract from.
// Members are destroyed in reverse order: the stream finishes its steps (finish_steps)
// before the step they point at (gpu_step) goes. It must not outlive the loader, whose device
// its steps, events and monitor use.
struct BenchRunState {
  std::unique_ptr<Monitor> monitor;
  const cuda::CudaDevice* cuda_device = nullptr;  // the loader's device, when it is CUDA
  SimulatedStep gpu_step;
  std::deque<std::shared_ptr<DeviceEvent>> steps_in_flight;  // CUDA: each step's end
  FinishSteps finish_steps;
  double step_s = 0;  // the time the simulated GPU worked
  // The source's figures before the run (LoaderStats::source): its chunk counters, when it
  // decodes chunks (an HDF5 source), are what the run's subtract from.
  SourceStats source_before;
  int64_t peak_anon = 0;
  HostMemoryPool::Counters pool_before;
  std::chrono::steady_clock::time_point start{};
  std::chrono::steady_clock::time_point first_batch{};
  // The end of the first epoch (the consumer's view) and the samples it delivered: the rate
  // after it leaves out the process's first touch of the source and of fresh batch memory.
  std::chrono::steady_clock::time_point first_epoch_end{};
  int64_t first_epoch_samples = 0;
  double first_epoch_step_s = 0;  // the simulated GPU's work in the first epoch (host step)
  std::chrono::steady_clock::time_point end{};
  FinalBusyWindow final_busy{std::chrono::seconds(5)};  // BenchResult::gpu_busy_fraction_final
  std::chrono::steady_clock::time_point last_report{};  // the last progress update
};

// How often the run samples its memory and reports progress.
constexpr std::chrono::milliseconds kReportEvery{100};

// Opens the loader (and its cache) and records what it reads, where, and its set-up time.
OpenedLoader OpenBenchLoader(std::shared_ptr<Source> source, const BenchConfig& config,
                             BenchResult& result) {
  const auto setup_start = std::chrono::steady_clock::now();
  OpenedLoader opened = [&] {
    SigintCancels sigint;  // Ctrl-C stops a cache build, preload or upload cleanly
    LoaderRecipe recipe = config.open;
    recipe.source = std::move(source);
    OpenedLoader o = OpenLoader(std::move(recipe));
    sigint.ThrowIfInterrupted("opening the loader");
    return o;
  }();
  const Loader& loader = *opened.loader;
  result.source = loader.source().Describe();
  result.setup_s = std::max(
      0.0, Seconds(std::chrono::steady_clock::now() - setup_start) - opened.cache.open_seconds);
  if (opened.cache.tier != CacheTier::kNone || config.open.cache.tier != CacheTier::kNone) {
    result.cache = opened.cache.ToString();
  }
  result.device = loader.device().name();
  return opened;
}

// Starts the monitor and the simulated GPU, and reads the counters the run's figures
// subtract from.
void PrepareRun(const Loader& loader, const BenchConfig& config, BenchRunState& run) {
  if (config.monitor || config.doctor) {
    MonitorOptions mo;
    mo.interval = std::chrono::milliseconds(500);
    run.monitor = std::make_unique<Monitor>(mo);
    run.monitor->Start();
  }
  run.cuda_device = dynamic_cast<const cuda::CudaDevice*>(loader.options().device.get());
  run.gpu_step.ms = config.step_ms;
  run.finish_steps.device = config.step_ms > 0 ? run.cuda_device : nullptr;
  run.source_before = loader.stats().source;
  run.peak_anon = StatusBytes("RssAnon");
}

// The simulated training step on one batch, when the run has one.
void SimulateStep(const Loader& loader, Batch& batch, const BenchConfig& config,
                  BenchRunState& run) {
  if (config.step_ms > 0 && run.cuda_device != nullptr && batch.ready_event()) {
    // On CUDA the step is work on the default stream after the batch's copy, which the
    // loader times with events (LoaderStats::GpuBusyFraction).
    batch.WaitOn(0);
    EnqueueSimulatedKernel(*run.cuda_device, run.gpu_step);
    run.steps_in_flight.push_back(loader.options().device->RecordOn(0));
    if (run.steps_in_flight.size() > kStepsInFlight) {
      run.steps_in_flight.front()->Wait();
      run.steps_in_flight.pop_front();
    }
  } else if (config.step_ms > 0) {
    // A GPU step leaves the CPU free: sleep, as the host thread would wait on the GPU.
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(config.step_ms));
    run.step_s += Seconds(std::chrono::steady_clock::now() - t0);
  }
}

// The progress after a batch: rate, wait and, when the monitor shows, its status line.
void UpdateProgress(const Loader& loader, const BenchConfig& config, const BenchRunState& run,
                    int64_t batch, int64_t samples, BenchProgress& progress) {
  progress.batch = batch;
  progress.samples = samples;
  progress.elapsed_s = Seconds(std::chrono::steady_clock::now() - run.start);
  progress.samples_per_s = progress.elapsed_s > 0 ? samples / progress.elapsed_s : 0;
  progress.consumer_wait_fraction = loader.stats().ConsumerWaitFraction();
  if (run.monitor && config.monitor) {
    if (auto snapshot = run.monitor->Latest()) progress.status_line = FormatStatusLine(*snapshot);
  }
}

// The measured loop: whole epochs of Next() and the simulated step, until `epochs` or
// `seconds` says stop.
void RunEpochs(Loader& loader, const BenchConfig& config, BenchRunState& run, BenchResult& result,
               const std::function<void(const BenchProgress&)>& on_progress) {
  BenchProgress progress;
  progress.epochs = config.epochs;
  progress.seconds = config.seconds;
  progress.batches_per_epoch = loader.batches_per_epoch();
  for (int e = 0; e < config.epochs; ++e) {
    if (config.seconds > 0 && e > 0 &&
        Seconds(std::chrono::steady_clock::now() - run.start) >= config.seconds) {
      result.epochs = e;
      break;
    }
    progress.epoch = e;
    progress.batch = 0;
    int64_t batches = 0;
    while (auto batch = loader.Next()) {
      ++batches;
      if (run.first_batch == std::chrono::steady_clock::time_point{}) {
        run.first_batch = std::chrono::steady_clock::now();
      }
      result.samples += batch->size();
      SimulateStep(loader, *batch, config, run);
      batch.reset();
      if (config.step_ms > 0) {
        const double busy_s = run.cuda_device != nullptr
                                  ? 1e-9 * static_cast<double>(run.gpu_step.slept_ns.load())
                                  : run.step_s;
        run.final_busy.Mark(std::chrono::steady_clock::now(), busy_s);
      }
      // The run's own bookkeeping (reading /proc, the loader's stats, the progress line) is
      // work a training loop does not do: a few times a second, not per batch, so a short
      // step measures the loader rather than the bench.
      const auto now = std::chrono::steady_clock::now();
      if (now - run.last_report >= kReportEvery || batches == progress.batches_per_epoch) {
        run.last_report = now;
        run.peak_anon = std::max(run.peak_anon, StatusBytes("RssAnon"));
        UpdateProgress(loader, config, run, batches, result.samples, progress);
        if (on_progress) on_progress(progress);
      }
    }
    if (e == 0) {
      run.first_epoch_end = std::chrono::steady_clock::now();
      run.first_epoch_samples = result.samples;
      run.first_epoch_step_s = run.step_s;
    }
  }
}

// Waits for the simulated GPU's last steps, stops the clock, and records the fresh batch
// memory the run took and its rate after the first epoch.
void EndRun(BenchRunState& run, BenchResult& result) {
  if (run.cuda_device != nullptr && !run.steps_in_flight.empty()) {
    SynchronizeDefaultStream(*run.cuda_device);  // the last steps belong to the run
    run.steps_in_flight.clear();
  }
  // The time the simulated GPU actually worked, not the nominal step times.
  if (run.cuda_device != nullptr) {
    run.step_s += 1e-9 * static_cast<double>(run.gpu_step.slept_ns.load());
  }
  run.end = std::chrono::steady_clock::now();
  const HostMemoryPool::Counters pool_after = HostMemoryPool::Instance().counters();
  result.fresh_batch_memory_bytes = pool_after.fresh_bytes - run.pool_before.fresh_bytes;
  result.fresh_batch_memory_s =
      1e-9 * static_cast<double>(pool_after.fault_ns - run.pool_before.fault_ns);
  if (result.epochs > 1 && run.first_epoch_end != std::chrono::steady_clock::time_point{} &&
      run.end > run.first_epoch_end) {
    result.first_epoch_s = Seconds(run.first_epoch_end - run.start);
    result.later_samples_per_s = static_cast<double>(result.samples - run.first_epoch_samples) /
                                 Seconds(run.end - run.first_epoch_end);
    if (result.step_ms > 0 && run.cuda_device == nullptr) {
      result.later_gpu_busy_fraction = std::min(
          1.0, (run.step_s - run.first_epoch_step_s) / Seconds(run.end - run.first_epoch_end));
    }
  }
}

// The run's figures from the loader's stats, the monitor and the source's counters.
void CollectRunFigures(const Loader& loader, const BenchConfig& config, BenchRunState& run,
                       BenchResult& result) {
  if (run.monitor) {
    run.monitor->Stop();
    result.monitor_summary = run.monitor->Summary().ToText();
  }
  result.stats = loader.stats();
  const SourceStats& before = run.source_before;
  const SourceStats& after = result.stats.source;
  if (before.chunks_decoded >= 0 && after.chunks_decoded >= 0) {
    result.hdf5_chunks_decoded = after.chunks_decoded - before.chunks_decoded;
    result.hdf5_chunk_cache_hits = after.chunk_cache_hits - before.chunk_cache_hits;
    result.hdf5_chunk_cache_bytes = after.chunk_cache_bytes;
  }
  if (const GroupTable* groups = loader.groups()) {
    result.groups = groups->num_groups();
    result.pack_fill = loader.pack_fill();
  }
  result.bytes = result.stats.bytes;
  result.wall_s = Seconds(run.end - run.start);
  result.samples_per_s = result.wall_s > 0 ? result.samples / result.wall_s : 0;
  result.bytes_per_s = result.wall_s > 0 ? result.bytes / result.wall_s : 0;
  result.consumer_wait_fraction = result.stats.ConsumerWaitFraction();
  result.gpu_busy_fraction_events = result.stats.GpuBusyFraction();
  if (run.first_batch != std::chrono::steady_clock::time_point{}) {
    result.time_to_first_batch_s = Seconds(run.first_batch - run.start);
    const double steady = Seconds(run.end - run.first_batch);
    if (config.step_ms > 0 && steady > 0) {
      result.gpu_busy_fraction = std::min(1.0, run.step_s / steady);
    }
    if (config.step_ms > 0) result.gpu_busy_fraction_with_startup = run.step_s / result.wall_s;
  }
  result.gpu_busy_fraction_final = run.final_busy.Fraction();
}

void DiagnoseRun(const Loader& loader, const BenchConfig& config, Monitor* monitor,
                 BenchResult& result) {
  DoctorInput in = CollectDoctorInput(loader, monitor);
  // A simulated step keeps a simulated GPU busy: that is the utilization to judge by, over
  // the run's last seconds as the doctor's batches are the last ones (a remedy taken during
  // the run shows there). The events on the consumer stream, when they measured, take
  // precedence (Diagnose).
  if (config.step_ms > 0) {
    in.gpu_utilization = result.gpu_busy_fraction_final >= 0 ? result.gpu_busy_fraction_final
                                                             : result.gpu_busy_fraction;
    in.gpu_utilization_source = "simulated step";
  }
  const Diagnosis d = Diagnose(in);
  result.diagnosis_text = d.ToText();
  result.diagnosis_json = d.ToJson();
}

// Both ceilings, measured after the run with as many threads as its workers.
void MeasureCeilings(const BenchConfig& config, const OpenedLoader& opened, int64_t batch_bytes,
                     BenchResult& result) {
  const Loader& loader = *opened.loader;
  result.ceiling_bytes_per_s =
      MeasureMemcpyCeiling(result.bytes, batch_bytes, result.stats.workers);
  const double sample_bytes = static_cast<double>(result.bytes) / result.samples;
  result.ceiling_samples_per_s = result.ceiling_bytes_per_s / sample_bytes;
  result.ratio_to_ceiling = result.samples_per_s / result.ceiling_samples_per_s;
  result.later_ratio_to_ceiling = result.later_samples_per_s / result.ceiling_samples_per_s;
  const Sampler sampler(loader.source().size(),
                        ToSamplerOptions(loader.options(), loader.source()));
  // A rate: up to 3 of the run's epochs say it (a timed run's many epochs need not all be
  // read again).
  const int same_work_epochs = std::min(result.epochs, 3);
  // First on a fresh opening, as a program doing this work itself would start: it pays the
  // process's first touch of the mapping (page tables; on a VM each fault exits to the
  // hypervisor) as the loader's first epoch did. Then on the loader's source, warm, for the
  // epochs after the first. Both into batch buffers the run already faulted in: fresh
  // memory was tried, and its cost on a VM depends on what the kernel hands out (pages the
  // host took back cost 1 s per 0.5-0.8 GB): the same-work rate swung 2x run to run. The
  // loader's own fresh batch memory stays its cost, reported apart.
  const std::shared_ptr<Source> fresh = ReopenForSameWork(config, opened, loader.source());
  if (fresh) {
    result.same_work_fresh_opening = true;
    result.same_work_samples_per_s =
        MeasureSameWork(*fresh, sampler, same_work_epochs, result.stats.workers);
  }
  result.same_work_warm_samples_per_s =
      MeasureSameWork(loader.source(), sampler, same_work_epochs, result.stats.workers);
  if (!fresh) result.same_work_samples_per_s = result.same_work_warm_samples_per_s;
  result.same_work_bytes_per_s = result.same_work_samples_per_s * sample_bytes;
  if (result.same_work_samples_per_s > 0) {
    result.ratio_to_same_work = result.samples_per_s / result.same_work_samples_per_s;
  }
  if (result.same_work_warm_samples_per_s > 0) {
    result.later_ratio_to_same_work =
        result.later_samples_per_s / result.same_work_warm_samples_per_s;
  }
}

}  // namespace

BenchResult RunBench(std::shared_ptr<Source> source, const BenchConfig& config,
                     const std::function<void(const BenchProgress&)>& on_progress) {
  BenchResult result;
  result.epochs = config.epochs;
  result.step_ms = config.step_ms;
  // Before the open: the loader's workers start there, and may take their batch buffers before
  // the run begins.
  const HostMemoryPool::Counters pool_before = HostMemoryPool::Instance().counters();
  OpenedLoader opened = OpenBenchLoader(std::move(source), config, result);
  Loader& loader = *opened.loader;
  // After the loader: the run's queued steps, events and monitor use the loader's device, so
  // they go first (a run declared before the loader synchronized a destroyed context).
  BenchRunState run;
  run.pool_before = pool_before;
  PrepareRun(loader, config, run);
  run.start = std::chrono::steady_clock::now();
  RunEpochs(loader, config, run, result, on_progress);
  EndRun(run, result);
  CollectRunFigures(loader, config, run, result);
  if (config.doctor) DiagnoseRun(loader, config, run.monitor.get(), result);
  result.peak_rss_bytes = StatusBytes("VmHWM");
  result.peak_anon_rss_bytes = run.peak_anon;
  const int64_t batch_bytes =
      static_cast<int64_t>(loader.schema().SampleBytes()) * loader.options().batch_size;
  result.bound_anon_rss_bytes = (result.stats.prefetch + result.stats.workers) * batch_bytes +
                                (int64_t{100} << 20) +
                                std::max<int64_t>(0, result.hdf5_chunk_cache_bytes);
  if (config.measure_ceiling && result.bytes > 0) {
    MeasureCeilings(config, opened, batch_bytes, result);
  }
  return result;
}

std::string BenchResult::ToJson() const {
  nlohmann::json j = {
      {"source", source},
      {"device", device},
      {"cache", cache},  // what the cache chose and why; "" when none was asked for
      {"epochs", epochs},
      {"samples", samples},
      {"bytes", bytes},
      {"wall_s", wall_s},
      {"samples_per_s", samples_per_s},
      {"bytes_per_s", bytes_per_s},
      {"time_to_first_batch_s", time_to_first_batch_s},
      {"setup_s", setup_s},
      {"ceiling_bytes_per_s", ceiling_bytes_per_s},
      {"ceiling_samples_per_s", ceiling_samples_per_s},
      {"ratio_to_ceiling", ratio_to_ceiling},
      {"same_work_samples_per_s", same_work_samples_per_s},
      {"same_work_bytes_per_s", same_work_bytes_per_s},
      {"ratio_to_same_work", ratio_to_same_work},
      {"same_work_fresh_opening", same_work_fresh_opening},
      {"same_work_warm_samples_per_s", same_work_warm_samples_per_s},
      {"first_epoch_s", first_epoch_s},
      {"later_samples_per_s", later_samples_per_s},
      {"later_ratio_to_ceiling", later_ratio_to_ceiling},
      {"later_ratio_to_same_work", later_ratio_to_same_work},
      {"later_gpu_busy_fraction",
       later_gpu_busy_fraction >= 0 ? nlohmann::json(later_gpu_busy_fraction) : nlohmann::json()},
      {"fresh_batch_memory_bytes", fresh_batch_memory_bytes},
      {"fresh_batch_memory_s", fresh_batch_memory_s},
      {"consumer_wait_fraction", consumer_wait_fraction},
      {"step_ms", step_ms},
      {"gpu_busy_fraction", gpu_busy_fraction},
      {"gpu_busy_fraction_with_startup", gpu_busy_fraction_with_startup},
      {"gpu_busy_fraction_final",
       gpu_busy_fraction_final >= 0 ? nlohmann::json(gpu_busy_fraction_final) : nlohmann::json()},
      {"actions", stats.actions},
      {"gpu_busy_fraction_events",
       gpu_busy_fraction_events >= 0 ? nlohmann::json(gpu_busy_fraction_events) : nlohmann::json()},
      {"peak_rss_bytes", peak_rss_bytes},
      {"peak_anon_rss_bytes", peak_anon_rss_bytes},
      {"bound_anon_rss_bytes", bound_anon_rss_bytes},
      {"stats", nlohmann::json::parse(stats.ToJson())},
  };
  if (hdf5_chunks_decoded >= 0) {
    j["hdf5_chunks_decoded"] = hdf5_chunks_decoded;
    j["hdf5_chunk_cache_hits"] = hdf5_chunk_cache_hits;
    j["hdf5_chunk_cache_bytes"] = hdf5_chunk_cache_bytes;
  }
  if (groups > 0) {
    j["groups"] = groups;
    j["groups_per_s"] = groups_per_s;
    j["pack_fill"] = pack_fill;
  }
  if (!diagnosis_json.empty()) j["doctor"] = nlohmann::json::parse(diagnosis_json);
  return j.dump(2);
}

std::string FormatCount(double count) {
  std::string digits = fmt::format("{:.0f}", count);
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    out += digits[i];
    if ((n - i - 1) % 3 == 0 && i + 1 < n && digits[i] != '-') out += ',';
  }
  return out;
}

}  // namespace gpufeed::cli
