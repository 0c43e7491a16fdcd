// The doctor: says where each step's time goes, which stage makes the GPU wait, and what
// to change, with the numbers behind it.
//
// Input is what the loader measured per batch (read, decode and transform, copy, the
// consumer's wait in Next() and its step between calls), the loader's settings, and what
// the monitor saw (CPU, cgroup quota and throttling, RAM, GPU utilization and VRAM).
// Diagnose() is a pure function of that input (one rule per verdict, tried in order, in
// src/doctor/rules.cc), so each rule is unit-tested on recorded figures.
//
// Verdicts:
//   input-bound      the consumer waits for data; the slowest stage is named, and whether
//                    the CPU is saturated or the reads wait on storage
//   copy-bound       the copy to the device is the slowest stage, or the GPU waits for
//                    batches whose copy is still running while the loop does not wait
//   host-bound       no data wait, yet the GPU idles: the host side of the step (launches,
//                    synchronizations, small batches) is the bottleneck
//   memory-pressure  RAM or the cgroup memory limit is nearly exhausted
//   cpu-starved      the consumer waits for data while the loader's threads are runnable but
//                    not running (run-queue delay): other processes, or too many threads of
//                    this one, take the cores; no stage of the loader is to blame
//   healthy          the loader keeps up and the GPU (or the step) is the bottleneck
//   measuring        too little measured for a verdict yet (fewer than min_batches batches
//                    or min_seconds of the loop's time): what was seen so far
// The stage named for input-bound and copy-bound is the one the loop's wait was spent on
// (BatchTiming::waited_*: where each batch was while the loop waited for it), not the one
// left over once the others are ruled out.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpufeed/loader.h"
#include "gpufeed/monitor.h"

namespace gpufeed {

enum class Verdict {
  kHealthy,
  kInputBound,
  kCopyBound,
  kHostBound,
  kMemoryPressure,
  kCpuStarved,
  kMeasuring,
};
std::string_view VerdictName(Verdict verdict);  // "input-bound", ...

// The pipeline stage a verdict names, if any.
enum class Stage { kNone, kRead, kTransform, kCopy, kRemote };  // kRemote: "remote fetch"
std::string_view StageName(Stage stage);                        // "", "read", "transform", "copy"

struct DoctorInput {
  // The loader: recent batches (oldest first) and its settings.
  std::vector<BatchTiming> batches;
  int workers = 1;
  int prefetch = 1;
  int max_workers = 1;  // what the autotuner or the user may go up to
  int64_t batch_size = 0;
  double sample_bytes = 0;  // after transforms
  int64_t dataset_samples = 0;
  bool device_copy = false;            // batches are copied to a GPU
  CacheTier cache = CacheTier::kNone;  // the loader's cache tier
  // Samples the source stores together (Source::PreferredBlock: an HDF5 chunk's rows; 1 when
  // any order reads alike), and whether the loader shuffles whole blocks.
  int64_t source_block = 1;
  // Source::chunking()'s pieces: chunks one sample of `pieces_field` spans (1: whole samples).
  int64_t source_pieces_per_sample = 1;
  std::string pieces_field;
  std::vector<int64_t> pieces_chunk_shape;   // the dataset's chunk shape (samples first)
  std::vector<int64_t> pieces_sample_shape;  // that field's per-sample shape
  bool block_shuffle = false;
  // Rows made of a variable-length field (SourceStats::varlen_*): its items and the padding
  // in one epoch's rows, and the items cut from long samples; -1 for other sources.
  int64_t varlen_items = -1;
  int64_t varlen_pad_items = -1;
  int64_t varlen_truncated_items = -1;
  // Bytes the process fetched from storage while the loader ran (LoaderStats::
  // storage_read_bytes) against the bytes the loader delivered: reads served from the page
  // cache or memory fetch nothing, and waiting on them is memory copying, not storage.
  std::optional<uint64_t> storage_read_bytes;
  uint64_t delivered_bytes = 0;
  // The process's requests to object stores while the loader ran (LoaderStats::remote);
  // requests == 0 when the data is local.
  RemoteStats remote;
  // The machine (the monitor, /proc, cgroup v2). Unknown readings stay empty.
  int cpu_count = 1;
  std::optional<double> cpu_limit_cores;     // cgroup cpu.max
  std::optional<double> process_cpu_cores;   // the training process tree
  std::optional<double> machine_cpu_ratio;   // every process on the machine, 0-1
  std::optional<double> throttled_fraction;  // share of the window the cgroup throttled
  std::optional<uint64_t> ram_available_bytes;
  std::optional<uint64_t> ram_total_bytes;
  std::optional<uint64_t> cgroup_memory_limit_bytes;
  std::optional<uint64_t> cgroup_memory_used_bytes;
  std::optional<double> disk_read_bytes_per_second;
  // The GPU: utilization (NVML, or the GPU-busy share of the step measured otherwise) and
  // its memory.
  std::optional<double> gpu_utilization;
  std::string gpu_utilization_source = "NVML";  // what gpu_utilization came from, for the text
  // Timing events on the training loop's stream (BatchTiming::gpu_busy_ns), when the loop
  // named its stream: the share of the GPU's time not spent waiting for batches, over
  // gpu_event_steps steps, and the steps whose stream had run dry before the loop asked
  // for the next batch. Preferred over gpu_utilization: NVML samples whether a kernel ran
  // in each 1/6 s, the events say exactly when the GPU waited for data. Time the GPU idles
  // inside a step (waiting for the host) counts as busy here: that part stays NVML's.
  std::optional<double> gpu_busy_events;
  int64_t gpu_event_steps = 0;
  int64_t gpu_drained_steps = 0;
  std::optional<uint64_t> vram_used_bytes;
  std::optional<uint64_t> vram_total_bytes;
  // The busiest processes on the machine while the loader was CPU-starved ("pid 4242
  // cc1plus: 0.98 cores"), busiest first; filled by CollectDoctorInput only then.
  std::vector<std::string> top_cpu_processes;
  // The first batches after start-up (threads, buffers, first reads), left out of `batches`
  // and reported apart.
  int64_t warmup_batches = 0;
  double warmup_seconds = 0;
  // Below this much measurement the doctor says what it saw, not a verdict.
  int64_t min_batches = 16;
  double min_seconds = 1.0;  // of the loop's time (its waits plus its steps)
};

struct Diagnosis {
  Verdict verdict = Verdict::kHealthy;
  Stage stage = Stage::kNone;         // named for input-bound and copy-bound (and cpu-starved, the
                                      // stage its wait was spent in, where one holds a good part)
  std::string headline;               // one sentence with the deciding numbers
  std::vector<std::string> evidence;  // the figures behind it
  std::vector<std::string> advice;    // what to change, each with its numbers
  // Shares of the consumer's time and of the workers' time, 0-1.
  double consumer_wait_fraction = 0;
  double worker_busy_fraction = 0;
  // The GPU's busy share the verdict used, and how it was measured: "events" (on the
  // training stream), the gpu_utilization_source ("NVML"), or "" (-1: unknown).
  double gpu_busy_fraction = -1;
  std::string gpu_measure;
  // What was judged: batches and seconds of the loop's time; the share of the loop's wait its
  // loader threads spent runnable without a CPU (-1: unknown); and where the batches were
  // while the loop waited (shares of the wait: queued, buffer, read, transform, copy,
  // handoff; empty when unknown).
  int64_t batches = 0;
  double measured_seconds = 0;
  double starved_fraction = -1;
  std::vector<std::pair<std::string, double>> wait_path;

  std::string ToText() const;
  std::string ToJson() const;
};

// The rules. REQUIRES: input.batches non-empty for a verdict other than "healthy, nothing
// measured yet".
Diagnosis Diagnose(const DoctorInput& input);

// Gathers the input from a running loader (its last `window` batches, or as many more as
// cover DoctorInput::min_seconds of the loop's time, with their
// event-measured GPU figures) and, when given, the monitor (its latest snapshot, and the
// throttling over the last 10 s of its history).
DoctorInput CollectDoctorInput(const Loader& loader, const Monitor* monitor, size_t window = 64);

}  // namespace gpufeed
