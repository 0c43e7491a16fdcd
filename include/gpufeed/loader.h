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
//
// The types a loader takes and gives live in their own headers, included here:
// gpufeed/loader_options.h (LoaderOptions), gpufeed/batch.h (Batch, FieldView) and
// gpufeed/loader_stats.h (BatchTiming, LoaderStats, LoaderState).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/batch.h"
#include "gpufeed/device.h"
#include "gpufeed/groups.h"
#include "gpufeed/loader_options.h"
#include "gpufeed/loader_stats.h"
#include "gpufeed/schema.h"
#include "gpufeed/source.h"
#include "gpufeed/transforms.h"

namespace gpufeed {

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

  // Calls `observer` on the consumer thread inside Next() each time a step finishes (the
  // previous batch's step is known), before the next batch is handed out; an empty function
  // removes it. The observer may read stats() and RecentBatches() and call SetParallelism()
  // and RecordAction(); it must not call Next(). What gpufeed/remedies.h attaches.
  void SetStepObserver(std::function<void()> observer);
  // Adds a line to stats().actions: something done to the loader while it runs, with why.
  // Callable from any thread.
  void RecordAction(std::string action);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufeed
