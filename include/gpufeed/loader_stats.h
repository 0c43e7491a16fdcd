// What a Loader reports and saves: BatchTiming (one delivered batch's time in each stage, and
// where it was while the consumer waited for it), LoaderStats (those times accumulated, with
// the pool and GPU step figures) and LoaderState (where the loader stands in its plan, the
// checkpoint Restore() resumes from, with JSON forms). Plain value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/remote.h"
#include "gpufeed/source.h"

namespace gpufeed {

// One delivered batch's time in each stage, in nanoseconds.
struct BatchTiming {
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t rows = 0;
  int64_t read_ns = 0;
  int64_t transform_ns = 0;
  int64_t copy_ns = 0;           // issuing the copy, and waiting for a pinned buffer to free
  int64_t buffer_wait_ns = 0;    // the worker waiting for a free batch buffer
  int64_t queue_wait_ns = 0;     // ready, waiting for the consumer to ask
  int64_t consumer_wait_ns = 0;  // the consumer blocked in the Next() that returned it
  int64_t step_ns = 0;           // from that Next() returning to the next Next() call
  int workers = 0;               // active workers when it was delivered
  int prefetch = 0;
  // The critical path: where this batch was while the consumer waited for it in Next(),
  // summing to consumer_wait_ns. Not yet taken by a worker (every worker busy with earlier
  // batches); a worker waiting for a free batch buffer; reading; transforming; copying to the
  // device; ready, but the consumer not yet running again (a wake-up the scheduler delayed).
  int64_t waited_queued_ns = 0;
  int64_t waited_buffer_ns = 0;
  int64_t waited_read_ns = 0;
  int64_t waited_transform_ns = 0;
  int64_t waited_copy_ns = 0;
  int64_t waited_handoff_ns = 0;
  // Run-queue delay (runnable, but no CPU free: /proc/thread-self/schedstat) of the worker
  // while it built this batch and handed it over, and of the consumer while it waited for it;
  // -1 = unknown. build_wall_ns: the worker's wall time from starting the batch to handing it
  // over.
  int64_t worker_runqueue_ns = -1;
  int64_t consumer_runqueue_ns = -1;
  int64_t build_wall_ns = 0;
  // On the GPU's clock, from timing events on the consumer's stream, when the consumer named
  // it (WaitOn / __dlpack__(stream)); -1 = not measured (no stream, or not harvested yet).
  // gpu_idle_ns: the GPU waited for this batch: from when it had finished the previous step
  // and the loop had asked for this batch, to when this batch was on the GPU (the loop
  // blocked in Next(), or the copy still running). gpu_busy_ns: the rest of this step, to
  // when the GPU finished it or the loop called Next() again, whichever was later; so a GPU
  // waiting for a late host counts as busy here, and the step is flagged gpu_drained.
  int64_t gpu_busy_ns = -1;
  int64_t gpu_idle_ns = -1;
  bool gpu_drained = false;  // the stream had no work left when the loop called Next() again
};

// Accumulated time per stage, in nanoseconds, summed over workers for the worker stages.
struct LoaderStats {
  int64_t batches = 0;  // delivered to the consumer
  int64_t samples = 0;
  int64_t bytes = 0;             // delivered, after transforms
  int64_t read_ns = 0;           // Source::Read, summed over workers
  int64_t transform_ns = 0;      // transforms, summed over workers
  int64_t copy_ns = 0;           // issuing device copies and waiting for pinned staging
                                 // buffers that earlier copies still read
  int64_t buffer_wait_ns = 0;    // workers waiting for a free batch buffer
  int64_t queue_wait_ns = 0;     // batches ready, waiting for the consumer to ask
  int64_t consumer_wait_ns = 0;  // the consumer blocked inside Next()
  int64_t consumer_step_ns = 0;  // between Next() calls: the training step
  int64_t first_batch_ns = 0;    // construction (or restart) to the first batch
  int64_t wall_ns = 0;           // first Next() call to now
  int workers = 0;
  int prefetch = 0;
  int buffers = 0;            // batch buffers in the pool(s), allocated once
  int buffers_allocated = 0;  // of those, allocated so far (lazily, never freed early)
  int64_t buffer_bytes = 0;   // bytes of one batch buffer
  std::string device;
  std::vector<std::string> tuning_log;  // the autotuner's changes, each with its reason
  // What was done to the loader's source while it ran, each once with its evidence ("batch
  // 23: read-bound: the loop waited 94% of its time, 98% of that on reads; building a RAM
  // copy of 0.8 GB in the background"): gpufeed/remedies.h.
  std::vector<std::string> actions;
  // Timing events on the consumer's stream (see BatchTiming::gpu_busy_ns), summed over the
  // gpu_steps steps that have both figures; all 0 when the consumer never named a stream.
  int64_t gpu_steps = 0;
  int64_t gpu_busy_ns = 0;
  int64_t gpu_idle_ns = 0;
  int64_t gpu_drained_steps = 0;  // steps whose stream had run dry before the loop asked again
  // Bytes the process fetched from storage since the loader was made (/proc/self/io
  // read_bytes: page-cache hits excluded); -1 unknown. Against `bytes` it tells a read
  // that waits on storage from one that copies memory.
  int64_t storage_read_bytes = -1;
  // The process's requests to object stores and HTTP servers since the loader was made
  // (gpufeed/remote.h; counters are the difference, latency and concurrency the process's
  // figures): all zero when the data is local.
  RemoteStats remote = {};
  // What the loader's source reports now (Source::Stats): the cache tier serving it, how far a
  // copy made while it runs is (the cache's background fill, the remedies' copy), and an
  // HDF5 source's chunk counters since it was opened, a cache in front of it or not.
  SourceStats source = {};

  // Fraction of the consumer's time spent waiting in Next(): the GPU's data stall.
  double ConsumerWaitFraction() const;
  // gpu_busy_ns / (gpu_busy_ns + gpu_idle_ns): the share of the GPU's time not spent waiting
  // for batches, measured by events; -1 when no step was measured.
  double GpuBusyFraction() const;
  std::string ToJson() const;
};

// Where a loader stands: the epoch and the next batch of it to deliver. Restore() resumes
// exactly there. Everything that shapes the plan is checked on restore: `seed`, `batch_size`,
// and, in states saved since they were recorded (older states lack them and skip those
// checks), the data set's sample count and schema, the shuffle mode, drop_last and pad.
//
// `global_consumed` (recorded since the order stopped depending on the world size) is how far
// every rank together has gone in the epoch's global order, taking every rank to be at the
// same batch, as under DDP. A state that has it resumes at any world size and rank: a loader
// at the saved rank and world size goes on from `batch` (of the plan that starts at
// `plan_start`); any other deals the rest of the global order, [global_consumed, samples), to
// its ranks (pipeline/sampler.h), so a state from any one rank serves them all. A state without it
// must match `rank` and `world_size`. Packed groups change world size only at an epoch's
// boundary.
struct LoaderState {
  // The format of the state: 2 since rows could be made of variable-length fields (padded or
  // packed; their options show in `schema` and `samples`). A state without one is of format 1
  // and reads as it did; a later format is refused by name.
  static constexpr int kVersion = 2;
  int version = kVersion;
  int64_t epoch = 0;
  int64_t batch = 0;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  int64_t batch_size = 0;
  std::optional<int64_t> samples;      // the source's sample count
  std::optional<std::string> schema;   // the source's schema, as Schema::ToString
  std::optional<std::string> shuffle;  // "none", "full" or "block:N"
  std::optional<bool> drop_last;
  std::optional<bool> pad;
  // A hash of the data set's first, middle and last samples ("xxh3:..."), so that a state is
  // not restored over another file of the same length and fields.
  std::optional<std::string> data;
  // Positions of the epoch's global order every rank together has consumed (see above).
  std::optional<int64_t> global_consumed;
  // Where the saved epoch's plan started in the global order, when not at 0: the epoch was
  // itself resumed from a state of another world size, and `batch` counts from there.
  std::optional<int64_t> plan_start;

  std::string ToJson() const;
  // Throws Error(kInvalidArgument) for malformed JSON.
  static LoaderState FromJson(std::string_view json);
};

}  // namespace gpufeed
