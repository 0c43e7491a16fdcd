// LoaderMetrics: what a loader measures about itself: the stage times summed over workers,
// the consumer's wait and step times, one timing per delivered batch (the last
// kTimingsKept), the GPU figures of the consumer's stream, and the autotuner's log. It turns
// them into LoaderStats and RecentBatches.
//
// A delivered batch's timing is "pending" until the consumer calls Next() again (its step
// time is only known then): Delivered() opens it, FinishPending() closes it and keeps it.
//
// Thread-safety: AddWorkerTiming, Stats, Recent, LogTuning and LogAction may be called from any thread.
// BeginNext, FinishPending, Delivered, EndOfEpoch and StartRun are for the loader's consumer
// thread (one at a time): the pending timing is that thread's alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_annotations.h"
#include "gpufeed/loader_stats.h"
#include "pipeline/measure/gpu_busy_tracker.h"
#include "pipeline/measure/trace_recorder.h"

namespace gpufeed {

// Splits the consumer's wait in Next(), from `called_ns` to `returned_ns`, by where the batch
// was meanwhile (BatchTiming::waited_*): before `stamps.start_ns` no worker had taken it; then
// a buffer wait, the read, the transforms, the copy up to `ready_ns` (or to the worker's
// hand-over, stamps.handed_ns, when later), and after that the consumer's wake-up. A batch without
// a read (the device tier's gather) goes from its buffer wait straight to the copy.
void AttributeWait(BatchTiming& timing, const BatchStamps& stamps, int64_t called_ns,
                   int64_t ready_ns, int64_t returned_ns);

class LoaderMetrics {
 public:
  static constexpr size_t kTimingsKept = 4096;

  explicit LoaderMetrics(std::shared_ptr<GpuBusyTracker> gpu_busy);
  LoaderMetrics(const LoaderMetrics&) = delete;
  LoaderMetrics& operator=(const LoaderMetrics&) = delete;

  // A worker built a batch: adds its read, transform, copy and buffer-wait times.
  void AddWorkerTiming(const BatchTiming& timing);

  // A run of workers starts (construction, SetEpoch, Restore): the time to the first batch is
  // measured from `now_ns`, and a pending timing is dropped.
  void StartRun(int64_t now_ns) EXCLUDES(mu_);
  // Next() was called at `called_ns`: the consumer's step since the last return ends.
  void BeginNext(int64_t called_ns) EXCLUDES(mu_);
  // Closes the pending timing (the previous batch's step ended at `called_ns`; `drained`: the
  // GPU had run dry) and keeps it. Returns it for the autotuner; nullopt when none was open.
  std::optional<BatchTiming> FinishPending(int64_t called_ns, bool drained) EXCLUDES(mu_);
  // Next() returned the end of an epoch.
  void EndOfEpoch(int64_t now_ns) EXCLUDES(mu_);
  // Next() hands out a batch built with `timing` and `stamps`, ready since `ready_ns`, as GPU
  // step `gpu_step`, `bytes` long; the window was (workers, prefetch). Opens its pending
  // timing, with the consumer's wait split by where the batch was (AttributeWait).
  void Delivered(BatchTiming timing, const BatchStamps& stamps, int64_t called_ns, int64_t ready_ns,
                 int64_t gpu_step, int64_t bytes, int workers, int prefetch) EXCLUDES(mu_);
  // One autotuner change, with its reason.
  void LogTuning(std::string line) EXCLUDES(mu_);
  // One remedy applied to the loader (LoaderStats::actions).
  void LogAction(std::string line) EXCLUDES(mu_);

  // The figures measured here; the caller fills in the parallelism, buffers and device.
  LoaderStats Stats() const EXCLUDES(mu_);
  // The last `n` delivered batches, oldest first, with the GPU figures harvested so far.
  std::vector<BatchTiming> Recent(size_t n) const EXCLUDES(mu_);
  // Takes the GPU figures of completed timing events (never waits for the GPU).
  void HarvestGpuFigures() const EXCLUDES(mu_);

 private:
  struct KeptTiming {
    BatchTiming timing;
    int64_t gpu_step = -1;  // the GpuBusyTracker step it was, to find its GPU figures
  };

  const std::shared_ptr<GpuBusyTracker> gpu_busy_;
  const std::optional<uint64_t> storage_read_bytes_at_start_;  // /proc/self/io at construction
  const RemoteStats remote_at_start_;  // the process's remote figures at construction

  std::atomic<int64_t> delivered_batches_{0};
  std::atomic<int64_t> delivered_samples_{0};
  std::atomic<int64_t> delivered_bytes_{0};
  std::atomic<int64_t> read_ns_{0};
  std::atomic<int64_t> transform_ns_{0};
  std::atomic<int64_t> copy_ns_{0};
  std::atomic<int64_t> buffer_wait_ns_{0};
  std::atomic<int64_t> queue_wait_ns_{0};
  std::atomic<int64_t> consumer_wait_ns_{0};
  std::atomic<int64_t> consumer_step_ns_{0};

  // Consumer thread only: the last delivered batch, its step not known yet.
  std::optional<BatchTiming> pending_timing_;
  int64_t pending_gpu_step_ = -1;

  mutable Mutex mu_;
  int64_t run_start_ns_ GUARDED_BY(mu_) = 0;
  int64_t first_batch_ns_ GUARDED_BY(mu_) = 0;
  int64_t wall_start_ns_ GUARDED_BY(mu_) = 0;   // the first Next() call
  int64_t last_return_ns_ GUARDED_BY(mu_) = 0;  // the last Next() return
  std::deque<KeptTiming> timings_ GUARDED_BY(mu_);
  // GpuBusyTracker step -> (gpu_busy_ns, gpu_idle_ns), -1 where not measured yet. Keyed by
  // step, not (epoch, batch): after SetEpoch/Restore the same batch runs again. Filled by
  // const readers too (harvesting is lazy), hence mutable.
  mutable std::map<int64_t, std::pair<int64_t, int64_t>> gpu_figures_ GUARDED_BY(mu_);
  std::vector<std::string> tuning_log_ GUARDED_BY(mu_);
  std::vector<std::string> actions_ GUARDED_BY(mu_);
};

}  // namespace gpufeed
