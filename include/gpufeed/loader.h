// Loader: turns a Source into a stream of batches on a device, ahead of the training step.
//
//   Sampler -> workers (threads) -> Source::Read into a batch buffer -> transforms ->
//   Device copy (when the device needs one) -> reorder -> Next()
//
// Workers build whole batches, at most `workers + prefetch` ahead of the consumer, and
// Next() hands them out in plan order, so a seed gives the same batches every run. Epochs
// follow one another without a pause: workers start the next epoch's first batches while
// the consumer finishes the current one. The first error in a worker stops the producers
// and is raised by the next Next(), naming the sample and file. Destroying a loader
// mid-epoch stops and joins every thread.
//
//   gpufeed::Loader loader(gpufeed::OpenNumpy("train"), {.batch_size = 8192});
//   while (auto batch = loader.Next()) { use(batch->field("mel")); }   // one epoch
//
// Thread-safety: Next, SetEpoch, State and Restore are for one consumer thread at a time.
// stats() may be called from any thread. A Batch may be dropped on any thread.
// fork(): a loader belongs to the process that made it. In a child forked after that, Next,
// SetEpoch and Restore throw Error(kInvalidArgument) saying so, and destroying it there
// frees nothing (its threads and locks were not copied into the child; the memory goes when
// the child exits).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/device.h"
#include "gpufeed/groups.h"
#include "gpufeed/schema.h"
#include "gpufeed/source.h"
#include "gpufeed/transforms.h"

namespace gpufeed {

struct LoaderOptions {
  int64_t batch_size = 0;     // Required: > 0
  bool shuffle = true;        // Default: true
  uint64_t seed = 0;          // Default: 0
  bool drop_last = false;     // Default: false
  bool pad = true;            // Default: true: shards of equal length (see SamplerOptions)
  int rank = -1;              // Default: -1 = $RANK, else 0
  int world_size = -1;        // Default: -1 = $WORLD_SIZE, else 1
  int64_t shuffle_block = 0;  // Default: 0 = full shuffle; < 0 = the source's PreferredBlock()
  int shuffle_window = 4;     // Default: 4 (see SamplerOptions)
  int workers = 0;            // Default: 0 = min(4, hardware threads)
  // Default: 0 = 2 * workers, within 128 MiB of batches but at least 2: batches kept ready
  // beyond the workers'
  int prefetch = 0;
  // Default: 3 batches the consumer may hold when it asks for more, planned for up front: a
  // Python loop still holds the last batch in its loop variable when it asks for the next, and
  // one kept for logging plus a spare should not grow the pool. A consumer that holds more
  // (keeps batches, or tensors of them, for metrics) makes the pool grow by one batch buffer
  // per extra batch held, with one warning naming the cost, up to held_budget_bytes of batch
  // buffers in all; past that Next() throws.
  int max_outstanding = 3;
  // Default: 0 = 10% of RAM (at most half of what is available) for host batches, a quarter
  // of the free device memory for device batches; never less than the planned pool.
  int64_t held_budget_bytes = 0;
  // Default: false. True: workers and prefetch are tuned online (hill climbing on measured
  // consumer wait and throughput) within max_workers and max_prefetch, starting from
  // `workers` and `prefetch`; every change is logged with its reason (stats().tuning_log).
  bool autotune = false;
  int max_workers = 0;                  // Default: 0 = the CPU count (the cgroup quota where lower)
  int max_prefetch = 0;                 // Default: 0 = 4 * max_workers, within 25% of available RAM
  std::shared_ptr<Device> device = {};  // Default: null = the host
  std::vector<std::shared_ptr<Transform>> transforms = {};  // Default: none
  int64_t start_epoch = 0;                                  // Default: 0
  // Default: "" = no file. A path: the stage trace (Loader::WriteTrace) is written there when
  // the loader is destroyed.
  std::string trace = {};
  // The batches the stage trace keeps. Default: 0 = those of the last minute (at most 65536);
  // n > 0: the last n (at most 65536); -1: none (no recording at all).
  int64_t trace_batches = 0;
  // Default: null. Grouped data (gpufeed/groups.h), with pack = true: batches of whole groups
  // (packed as src/pipeline/group_packer.h says; every row once per epoch, shuffle moves
  // groups), each listing its groups (Batch::groups()) and carrying an int64 field "group"
  // (the group of each row). drop_last does not apply.
  std::shared_ptr<const GroupTable> groups = {};
  bool pack = false;        // Default: false; required (true) with groups
  int64_t pack_window = 0;  // Default: 0 = automatic (groups for about 4 batches)
};

// Where one field of a batch lives: `rows` samples of `spec`, contiguous, C order.
struct FieldView {
  const FieldSpec* spec = nullptr;
  void* data = nullptr;
  int64_t rows = 0;
  DeviceId device;

  size_t bytes() const { return static_cast<size_t>(rows) * spec->SampleBytes(); }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

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

  // Fraction of the consumer's time spent waiting in Next(): the GPU's data stall.
  double ConsumerWaitFraction() const;
  // gpu_busy_ns / (gpu_busy_ns + gpu_idle_ns): the share of the GPU's time not spent waiting
  // for batches, measured by events; -1 when no step was measured.
  double GpuBusyFraction() const;
  std::string ToJson() const;
};

// Where a loader stands: the epoch and the next batch of it to deliver. Restore() resumes
// exactly there. Everything that shapes the plan is checked on restore: `seed`,
// `world_size`, `rank`, `batch_size`, and, in states saved since they were recorded (older
// states lack them and skip those checks), the data set's sample count and schema, the
// shuffle mode, drop_last and pad.
struct LoaderState {
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

  std::string ToJson() const;
  // Throws Error(kInvalidArgument) for malformed JSON.
  static LoaderState FromJson(std::string_view json);
};

class Batch {
 public:
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }  // batch number within the epoch
  int64_t size() const { return rows_; }
  const Schema& schema() const { return *schema_; }
  // The sample indices of the rows, in row order.
  std::span<const int64_t> indices() const { return indices_; }
  // The group parts of the batch, in row order (packed groups only; else empty).
  std::span<const BatchGroup> groups() const { return groups_; }
  // Throws Error(kNotFound) naming the fields when there is no such field.
  FieldView field(std::string_view name) const;
  FieldView field(int index) const;
  // The event after the batch's copy (null on the host): no consumer may read the batch
  // before it. WaitOn makes a consumer CUDA stream wait for it; Synchronize blocks the host.
  // WaitOn also names the stream the loader times the GPU's step on (LoaderStats::gpu_*): it
  // records a timing event on `stream` at the loader's next Next() call, and when this batch
  // is dropped, so the stream must stay alive until both.
  const std::shared_ptr<DeviceEvent>& ready_event() const { return ready_; }
  void WaitOn(uintptr_t stream) const;
  void Synchronize() const;

 private:
  friend class BatchBuilder;  // makes them
  struct Parts;
  explicit Batch(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
  const Schema* schema_ = nullptr;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
  int64_t rows_ = 0;
  std::vector<int64_t> indices_;
  std::vector<BatchGroup> groups_;
  std::vector<std::byte*> fields_;
  std::shared_ptr<DeviceEvent> ready_;
};

class Loader {
 public:
  // Throws Error(kInvalidArgument) for nonsense options (batch_size <= 0, rank >= world
  // size, negative workers), and whatever the transforms throw for the source's schema.
  Loader(std::shared_ptr<Source> source, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of the current epoch, or null once the epoch is over; the call after
  // that starts the next epoch. Rethrows a worker's error. Throws Error(kInvalidArgument)
  // when the consumer holds so many batches that one more buffer would pass
  // held_budget_bytes, and when called in a child process forked after the loader was made
  // (its worker threads do not exist there).
  std::unique_ptr<Batch> Next();

  // The epoch the next batch comes from. SetEpoch(e) makes the next Next() start epoch e
  // at its first batch (a no-op when that is already where the loader stands).
  int64_t epoch() const;
  void SetEpoch(int64_t epoch);
  LoaderState State() const;
  void Restore(const LoaderState& state);

  // The options in force: defaults resolved (workers, prefetch, max_workers, device).
  const LoaderOptions& options() const;
  const Schema& schema() const;  // after transforms
  int64_t batches_per_epoch() const;
  int64_t samples_per_epoch() const;
  const Source& source() const;
  const Device& device() const;
  // The groups of a grouped loader (LoaderOptions::groups), or null.
  const GroupTable* groups() const;
  // Packed groups: this rank's rows per epoch over its batches' capacity
  // (batches_per_epoch() * batch_size); 0 without groups.
  double pack_fill() const;
  int held_batches() const;  // batches the consumer has not dropped yet
  LoaderStats stats() const;
  // The last `n` delivered batches (at most 4096 are kept), oldest first. A batch's step_ns
  // is known once the consumer calls Next() again.
  std::vector<BatchTiming> RecentBatches(size_t n) const;

  // Writes the stage trace of the last batches delivered (LoaderOptions::trace_batches) as
  // Chrome trace-event JSON, for Perfetto or chrome://tracing: a track per worker with its
  // buffer wait, read (the decodes inside it), transform and copy spans per batch, the
  // consumer's track with its waits in Next() and the steps between, and counters (queue
  // depth, buffers free, workers active). Throws Error(kIo) naming `path`, and
  // Error(kInvalidArgument) when recording is off (trace_batches = -1).
  void WriteTrace(const std::string& path) const;

  // Changes the number of active workers and the prefetch depth while the loader runs.
  // Clamped to [1, max_workers] and [1, max_prefetch]. What the autotuner calls; callable
  // by hand too (from the consumer thread).
  void SetParallelism(int workers, int prefetch);
  int workers() const;
  int prefetch() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufeed
