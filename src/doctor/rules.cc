// The doctor's rules: Diagnose() computes the shared figures once (Figures), adds the
// evidence every verdict shows, then tries one function per verdict in order; the first that
// decides fills in the headline and the advice computed from the figures.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "doctor/figures.h"
#include "gpufeed/doctor.h"

namespace gpufeed {
namespace {

using doctor::Figures;
using doctor::Gb;
using doctor::Ms;
using doctor::Pct;
using doctor::Totals;

constexpr double kWaitInputBound = 0.10;  // the loop waits this share of its time for data
constexpr double kCpuSaturated = 0.90;    // of the usable cores
constexpr double kGpuIdle = 0.50;         // below this GPU utilization the GPU idles
constexpr double kMemoryFull = 0.95;      // of RAM or of the cgroup limit
// Reads are storage-bound only when the process fetched at least this share of the bytes it
// delivered from a device; below it the reads were served by the page cache or memory.
constexpr double kFromStorage = 0.10;
// The loop's wait counts as CPU starvation when the loader's threads on its path spent at
// least this share of it runnable without a CPU.
constexpr double kStarvedShare = 0.5;
// A sample cut into at least this many pieces by the file's chunks gets layout advice.
constexpr int64_t kManyPieces = 4;

// What shortens the copy stage. With the device cache tier the "copy" is the gather on the
// GPU, and the loader cannot run host transforms on rows that never reach the host.
void AddCopyAdvice(const DoctorInput& in, double batch_bytes, Diagnosis& d) {
  if (in.cache == CacheTier::kDevice) {
    d.advice.push_back(fmt::format(
        "the batches are gathered on the GPU from the device cache, so this is gather time: "
        "give a cast to float16 or bfloat16 to the cache (CacheOptions::transforms; `gpufeed "
        "bench -t cast:FIELD:float16 --cache device`), which applies it before the upload: "
        "each gather then moves {} instead of {}",
        Gb(batch_bytes / 2), Gb(batch_bytes)));
    return;
  }
  d.advice.push_back(fmt::format(
      "cast floating fields to float16 or bfloat16 on the host (transforms=['cast:FIELD:"
      "float16']): each batch moves {} instead of {}",
      Gb(batch_bytes / 2), Gb(batch_bytes)));
  d.advice.push_back(
      "cache='device' keeps the data set on the GPU and gathers batches "
      "there, with no copy per batch, where it fits the VRAM budget");
}

// "batch 128 uses 4.5 of 24.0 GB VRAM ...": how much of a process's VRAM grows with the
// batch (activations) and how much does not (weights, optimizer state, the CUDA context, a
// device cache) is not known from one reading, so no size is guessed here: the Python helper
// measures the step's peak at two sizes and suggests one.
std::optional<std::string> BatchSizeAdvice(const DoctorInput& in) {
  if (!in.vram_used_bytes || !in.vram_total_bytes || *in.vram_total_bytes == 0) return {};
  const double used = static_cast<double>(*in.vram_used_bytes);
  const double total = static_cast<double>(*in.vram_total_bytes);
  if (used <= 0 || used > 0.5 * total) return {};
  return fmt::format(
      "batch {} uses {} of {} VRAM: a larger batch may fit; "
      "gpufeed.suggest_batch_size(step, loader) measures how much of that memory grows with "
      "the batch and suggests a size (your setting stands until you change it)",
      in.batch_size, Gb(used), Gb(total));
}

}  // namespace

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kHealthy:
      return "healthy";
    case Verdict::kInputBound:
      return "input-bound";
    case Verdict::kCopyBound:
      return "copy-bound";
    case Verdict::kHostBound:
      return "host-bound";
    case Verdict::kMemoryPressure:
      return "memory-pressure";
    case Verdict::kCpuStarved:
      return "cpu-starved";
    case Verdict::kMeasuring:
      return "measuring";
  }
  return "unknown";
}

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kNone:
      return "";
    case Stage::kRead:
      return "read";
    case Stage::kTransform:
      return "transform";
    case Stage::kCopy:
      return "copy";
  }
  return "";
}

namespace {

// A rule's answer: whether it decided the verdict (filled into the Diagnosis), and whether
// its headline already gives the GPU's wait as the events measured it.
struct Ruling {
  bool decided = false;
  bool headline_tells_events = false;
};
constexpr Ruling kNotDecided{};
constexpr Ruling kDecided{true, false};

// What a RAM or shared-memory cache would save, when the loader has none.
std::optional<std::string> CacheAdvice(const DoctorInput& in, const Figures& f,
                                       std::string_view what_it_saves) {
  if (!f.ram_budget || f.set_bytes <= 0 || in.cache != CacheTier::kNone) return {};
  if (f.set_bytes <= *f.ram_budget) {
    return fmt::format(
        "the decoded set ({}) fits the RAM budget ({}): cache='ram' takes {} "
        "out of every epoch after the first",
        Gb(f.set_bytes), Gb(*f.ram_budget), what_it_saves);
  }
  return fmt::format(
      "the decoded set ({}) exceeds the RAM budget ({}): cache='shm' shares "
      "one copy among the processes of this node",
      Gb(f.set_bytes), Gb(*f.ram_budget));
}

void AddCacheAdvice(const DoctorInput& in, const Figures& f, std::string_view what_it_saves,
                    Diagnosis& d) {
  if (auto c = CacheAdvice(in, f, what_it_saves)) d.advice.push_back(*c);
}

// 1. Memory pressure overrides the rest: every other fix needs memory.
Ruling MemoryPressure(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  const bool cgroup_full = in.cgroup_memory_limit_bytes && in.cgroup_memory_used_bytes &&
                           *in.cgroup_memory_used_bytes >=
                               kMemoryFull * static_cast<double>(*in.cgroup_memory_limit_bytes);
  const bool ram_full = in.ram_available_bytes && in.ram_total_bytes &&
                        static_cast<double>(*in.ram_available_bytes) <
                            (1 - kMemoryFull) * static_cast<double>(*in.ram_total_bytes);
  if (!cgroup_full && !ram_full) return kNotDecided;
  d.verdict = Verdict::kMemoryPressure;
  d.headline = cgroup_full ? fmt::format("memory pressure: the container uses {} of its {} limit",
                                         Gb(static_cast<double>(*in.cgroup_memory_used_bytes)),
                                         Gb(static_cast<double>(*in.cgroup_memory_limit_bytes)))
                           : fmt::format("memory pressure: only {} of {} RAM is available",
                                         Gb(static_cast<double>(*in.ram_available_bytes)),
                                         Gb(static_cast<double>(*in.ram_total_bytes)));
  const int held = f.workers + in.prefetch;
  d.advice.push_back(fmt::format(
      "the loader holds up to {} batches of {} ({}): lower prefetch from {} to 1 frees {}", held,
      Gb(f.batch_bytes), Gb(held * f.batch_bytes), in.prefetch,
      Gb((in.prefetch - 1) * f.batch_bytes)));
  d.advice.push_back(
      "several processes on this node reading the same data: cache='shm' "
      "keeps one copy for all of them");
  return kDecided;
}

// 2. Too little measured: what was seen so far, and what a verdict needs.
Ruling TooLittle(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  if (static_cast<int64_t>(f.t.n) >= in.min_batches && f.ConsumerSeconds() >= in.min_seconds) {
    return kNotDecided;
  }
  d.verdict = Verdict::kMeasuring;
  d.headline = fmt::format(
      "measuring: {} batch(es) over {:.2f} s of the loop so far (it waited {} of that time for "
      "data); a verdict needs at least {} batches and {:.1f} s",
      static_cast<int64_t>(f.t.n), f.ConsumerSeconds(), Pct(d.consumer_wait_fraction),
      in.min_batches, in.min_seconds);
  d.advice.push_back("run longer (more batches) before judging the loader");
  return kDecided;
}

bool LoopWaitsForData(const Diagnosis& d) { return d.consumer_wait_fraction >= kWaitInputBound; }

// The loop waits on the loader's stages: its wait, less the part spent while the batch it
// waited for was already ready (then the loop itself was not running to take it: a
// descheduled or host-bound loop, not a stage of the loader; a scenario beside a CPU burner
// read 12% "wait" that was all hand-over as input-bound on read).
bool LoopWaitsOnStages(const Diagnosis& d, const Totals& t) {
  const double waited = t.WaitedTotal();
  const double on_stages = waited > 0 ? 1 - t.waited_handoff / waited : 1;
  return d.consumer_wait_fraction * on_stages >= kWaitInputBound;
}

// The slowest worker stage, in summed nanoseconds.
double SlowestStageNs(const Totals& t) { return std::max({t.read, t.transform, t.copy}); }

// The stage the loop's wait was spent on (the critical path), where the batches say; else (no
// path figures, or every wait spent before a worker took the batch: all workers busy with
// earlier batches) the stage the workers spend the most time in.
Stage WaitedStage(const Totals& t) {
  const double on_stage = std::max({t.waited_read, t.waited_transform, t.waited_copy});
  // A stage holding a good part of the wait; a sliver (the wait spent mostly elsewhere) does
  // not decide.
  if (on_stage > 0 && on_stage >= 0.2 * t.WaitedTotal()) {
    if (on_stage == t.waited_copy) return Stage::kCopy;
    return on_stage == t.waited_transform ? Stage::kTransform : Stage::kRead;
  }
  const double slowest = SlowestStageNs(t);
  if (slowest == t.copy && t.copy > 0) return Stage::kCopy;
  return slowest == t.transform && t.transform > 0 ? Stage::kTransform : Stage::kRead;
}

// 3. The loop waits for data while the loader's threads on its path sat runnable without a
// CPU for at least half of that wait: the machine's cores are taken (by other processes, or
// by this one's own threads), and no stage of the loader is to blame.
Ruling CpuStarved(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  const Totals& t = f.t;
  if (!LoopWaitsForData(d) || t.wait_with_runqueue <= 0 ||
      t.starved < kStarvedShare * t.wait_with_runqueue) {
    return kNotDecided;
  }
  d.verdict = Verdict::kCpuStarved;
  // The stage the starved wait was spent in, where one stage holds a good part of it: the
  // stage to judge again once the cores are free.
  const double on_stage = std::max({t.waited_read, t.waited_transform, t.waited_copy});
  if (on_stage >= 0.3 * t.WaitedTotal() && on_stage > 0) d.stage = WaitedStage(t);
  const bool own = in.process_cpu_cores && *in.process_cpu_cores >= kCpuSaturated * f.usable;
  std::string who;
  if (own) {
    who = fmt::format("this process's own threads use {:.2f} of {:.0f} usable cores",
                      *in.process_cpu_cores, f.usable);
  } else if (!in.top_cpu_processes.empty()) {
    who = "other processes take the cores: ";
    for (size_t i = 0; i < in.top_cpu_processes.size(); ++i) {
      who += (i ? ", " : "") + in.top_cpu_processes[i];
    }
  } else {
    who = in.process_cpu_cores
              ? fmt::format("this process uses only {:.2f} of {:.0f} cores: other processes "
                            "take the rest",
                            *in.process_cpu_cores, f.usable)
              : std::string("other threads or processes take the cores");
  }
  d.headline = fmt::format(
      "CPU-starved: the loop waited {} of its time for data, and for {} of that wait the "
      "loader's threads were runnable but had no CPU ({:.1f} ms per batch waiting for a core); "
      "{}{}",
      Pct(d.consumer_wait_fraction), Pct(t.starved / t.wait_with_runqueue),
      Ms(t.starved / t.runqueue_batches), who,
      d.stage != Stage::kNone
          ? fmt::format(" (the wait was spent mostly in the {} stage)", StageName(d.stage))
          : std::string());
  if (own) {
    d.advice.push_back(fmt::format(
        "the loader's {} worker(s) and the training step's own threads compete for {:.0f} "
        "cores: cap the step's threads (torch.set_num_threads) or use fewer workers",
        f.workers, f.usable));
  } else {
    d.advice.push_back(
        "give the training the cores: run it where they are free, or lower the other work's "
        "priority (nice, a cgroup cpu.weight); measure again once the competing load ends, "
        "since the loader's stages cannot be judged while they wait for a CPU");
  }
  return kDecided;
}

// 4a. The loop waits for data, and the copy to the device is the stage it waited on.
Ruling CopyStageBound(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  if (!LoopWaitsOnStages(d, f.t) || !in.device_copy || WaitedStage(f.t) != Stage::kCopy) {
    return kNotDecided;
  }
  d.verdict = Verdict::kCopyBound;
  d.stage = Stage::kCopy;
  const double copy_ms = f.PerBatch(f.t.copy) / f.workers;
  d.headline = fmt::format(
      "copy-bound: the loop waited {} of its time for data, and copying a {} batch to the "
      "device takes {:.1f} ms ({:.1f} GB/s) against a {:.1f} ms step",
      Pct(d.consumer_wait_fraction), Gb(f.batch_bytes), copy_ms,
      copy_ms > 0 ? f.batch_bytes / (copy_ms * 1e6) : 0.0, f.PerBatch(f.t.step));
  AddCopyAdvice(in, f.batch_bytes, d);
  return kDecided;
}

// Whether the CPU is saturated, by this process or by the machine, and how to say so.
struct CpuPicture {
  bool saturated = false;
  std::string text;
};

CpuPicture DescribeCpu(const DoctorInput& in, const Figures& f, const Diagnosis& d) {
  CpuPicture cpu;
  // Saturated by this process, or by the machine: other processes take the cores too.
  const bool machine_saturated = in.machine_cpu_ratio && *in.machine_cpu_ratio >= kCpuSaturated;
  cpu.saturated =
      machine_saturated ||
      (in.process_cpu_cores ? *in.process_cpu_cores >= kCpuSaturated * f.usable
                            : (d.worker_busy_fraction >= kCpuSaturated && f.workers >= f.usable));
  cpu.text = in.process_cpu_cores
                 ? fmt::format("the CPU is at {:.0f}% of {:.0f} cores", 100 * *in.process_cpu_cores,
                               f.usable)
                 : fmt::format("{} worker(s) on {:.0f} cores", f.workers, f.usable);
  if (machine_saturated && in.process_cpu_cores &&
      *in.process_cpu_cores < kCpuSaturated * f.usable) {
    cpu.text = fmt::format(
        "the machine's CPU is at {:.0f}% while this process uses {:.2f} "
        "cores: other processes take the rest",
        100 * *in.machine_cpu_ratio, *in.process_cpu_cores);
  }
  return cpu;
}

void TransformBound(const DoctorInput& in, const Figures& f, const CpuPicture& cpu,
                    double stage_busy, Diagnosis& d) {
  d.headline = fmt::format(
      "input-bound on transform: the loop waited {} of its time for data; host transforms "
      "take {:.1f} ms per batch against {:.1f} ms reading ({} busy on {} worker(s); {})",
      Pct(d.consumer_wait_fraction), f.PerBatch(f.t.transform), f.PerBatch(f.t.read),
      Pct(stage_busy), f.workers, cpu.text);
  d.advice.push_back(
      "run the costly transforms on the GPU, after the copy, where they cost "
      "microseconds per batch");
  if (!cpu.saturated && f.workers < f.usable) {
    d.advice.push_back(fmt::format("raise workers from {} to {}: {}", f.workers,
                                   static_cast<int>(f.usable), cpu.text));
  }
  AddCacheAdvice(in, f, "reading and decoding", d);
}

// Whether the reads came from memory: the process fetched (almost) nothing from storage for
// the bytes it delivered. Unknown counters (no /proc/self/io) say nothing either way.
bool ServedFromMemory(const DoctorInput& in) {
  return in.storage_read_bytes && in.delivered_bytes > 0 &&
         static_cast<double>(*in.storage_read_bytes) <
             kFromStorage * static_cast<double>(in.delivered_bytes);
}

// Reads served by the page cache (or memory) that still take the time: the workers copy
// memory. Faster storage would change nothing; fewer bytes or no host copy would.
void MemoryBound(const DoctorInput& in, const Figures& f, const CpuPicture& cpu, double stage_busy,
                 Diagnosis& d) {
  d.headline = fmt::format(
      "input-bound on read, memory-bound: the loop waited {} of its time for data; the "
      "workers spend {} of their time in reads while {}, but the process fetched only {} from "
      "storage for {} delivered: the reads are memory copies (from the page cache), not "
      "waits on storage",
      Pct(d.consumer_wait_fraction), Pct(stage_busy), cpu.text,
      Gb(static_cast<double>(*in.storage_read_bytes)), Gb(static_cast<double>(in.delivered_bytes)));
  if (in.device_copy && in.cache != CacheTier::kDevice) {
    d.advice.push_back(
        "cache='device' keeps the data set on the GPU and gathers batches there: no host "
        "copy per batch, where it fits the VRAM budget");
  }
  d.advice.push_back(fmt::format(
      "fewer bytes per sample: a cast to float16 or bfloat16 before the data set is written "
      "(or a device-cache transform) halves the {} each batch copies",
      Gb(f.batch_bytes)));
  AddCacheAdvice(in, f, "the page-table cost of gathering rows out of a file mapping", d);
}

void ReadBound(const DoctorInput& in, const Figures& f, const CpuPicture& cpu, double stage_busy,
               Diagnosis& d) {
  if (cpu.saturated) {
    d.headline = fmt::format(
        "input-bound on read, CPU-saturated: the loop waited {} of its time for data; read is "
        "{} busy on {} worker(s) and {}",
        Pct(d.consumer_wait_fraction), Pct(stage_busy), f.workers, cpu.text);
    AddCacheAdvice(in, f, "reading and decoding", d);
    if (in.source_block > 1 && !in.block_shuffle) {
      d.advice.push_back(fmt::format(
          "the source stores {} samples together (an HDF5 chunk): block shuffle "
          "(shuffle_block=-1) reads and decodes each chunk once per window instead of once "
          "per sample",
          in.source_block));
    }
  } else if (f.workers < std::max<double>(f.usable, in.max_workers)) {
    const int target = static_cast<int>(std::max<double>(f.usable, in.max_workers));
    d.headline = fmt::format(
        "input-bound on read: the loop waited {} of its time for data while {}; more workers "
        "would read in parallel",
        Pct(d.consumer_wait_fraction), cpu.text);
    d.advice.push_back(
        fmt::format("raise workers from {} to {} (or autotune=True)", f.workers, target));
    AddCacheAdvice(in, f, "reading", d);
  } else if (f.t.buffer_wait > f.t.read) {
    d.headline = fmt::format(
        "input-bound: the loop waited {} of its time for data while the workers waited {:.1f} "
        "ms per batch for a free batch buffer: batches are held too long or the pool is small",
        Pct(d.consumer_wait_fraction), f.PerBatch(f.t.buffer_wait));
    d.advice.push_back(
        fmt::format("drop each batch as soon as the step has used it; or raise "
                    "prefetch from {} to {}",
                    in.prefetch, 2 * in.prefetch));
  } else if (ServedFromMemory(in)) {
    MemoryBound(in, f, cpu, stage_busy, d);
  } else if (!in.storage_read_bytes) {
    // Without the process's I/O counters storage cannot be told from memory: say so rather
    // than blame either.
    d.headline = fmt::format(
        "input-bound on read: the loop waited {} of its time for data; the workers spend {} "
        "of their time in reads while {} (whether the reads wait on storage or copy memory "
        "is unknown: /proc/self/io is not readable here)",
        Pct(d.consumer_wait_fraction), Pct(stage_busy), cpu.text);
    AddCacheAdvice(in, f, "reading", d);
  } else {
    d.headline = fmt::format(
        "input-bound on read, I/O-bound: the loop waited {} of its time for data; the "
        "workers spend {} of their time in reads while {}: they wait on storage{}",
        Pct(d.consumer_wait_fraction), Pct(stage_busy), cpu.text,
        in.storage_read_bytes
            ? fmt::format(" (the process fetched {} from storage for {} delivered)",
                          Gb(static_cast<double>(*in.storage_read_bytes)),
                          Gb(static_cast<double>(in.delivered_bytes)))
            : std::string());
    if (in.disk_read_bytes_per_second) {
      d.evidence.push_back(
          fmt::format("the disks read {:.0f} MB/s", *in.disk_read_bytes_per_second / 1e6));
    }
    AddCacheAdvice(in, f, "storage", d);
    d.advice.push_back(
        "or move the data set to faster storage (local NVMe rather than a "
        "network file system)");
  }
}

// "each sample of mel spans 256 chunks of the file ([3125, 1, 4, 2]) ...": when a sample is
// cut into several pieces and no cache holds whole rows.
std::optional<std::string> PiecesAdvice(const DoctorInput& in) {
  if (in.source_pieces_per_sample < kManyPieces || in.cache != CacheTier::kNone ||
      in.pieces_chunk_shape.empty()) {
    return {};
  }
  std::vector<int64_t> whole = in.pieces_chunk_shape;
  const auto& shape = in.pieces_sample_shape;
  if (shape.size() + 1 == whole.size()) std::copy(shape.begin(), shape.end(), whole.begin() + 1);
  return fmt::format(
      "each sample of '{}' spans {} chunks of the file (chunks of [{}], as h5py's chunks=True "
      "picks them): a sample costs {} scattered copies; rewrite the dataset with chunks=({}) "
      "so a chunk holds whole samples, or cache='ram'/'shm' (built once, it stores whole "
      "rows)",
      in.pieces_field, in.source_pieces_per_sample, fmt::join(in.pieces_chunk_shape, ", "),
      in.source_pieces_per_sample, fmt::join(whole, ", "));
}

// 4b. The loop waits for data: name the stage (read or transform) and why it is slow.
Ruling InputBound(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  if (!LoopWaitsOnStages(d, f.t)) return kNotDecided;
  d.verdict = Verdict::kInputBound;
  d.stage = WaitedStage(f.t) == Stage::kTransform ? Stage::kTransform : Stage::kRead;
  const double stage_ns = d.stage == Stage::kTransform ? f.t.transform : f.t.read;
  const CpuPicture cpu = DescribeCpu(in, f, d);
  if (in.throttled_fraction && *in.throttled_fraction > 0.05) {
    d.evidence.push_back(fmt::format(
        "the cgroup throttled the process {} of the time: its CPU quota ({:.1f} cores) is the "
        "ceiling",
        Pct(*in.throttled_fraction), f.usable));
  }
  const double stage_busy = stage_ns / (f.workers * f.consumer);
  if (d.stage == Stage::kTransform) {
    TransformBound(in, f, cpu, stage_busy, d);
  } else {
    ReadBound(in, f, cpu, stage_busy, d);
    // The file's layout comes first: no worker count or cache tier reads a sample cut into
    // hundreds of pieces as fast as one whole row.
    if (auto a = PiecesAdvice(in)) d.advice.insert(d.advice.begin(), *a);
  }
  return kDecided;
}

// 5. The loop gets its data in time, yet the events show the GPU waiting for batches: the
// batch was handed over while its copy still ran (the loader delivers once the copy is
// issued), so the GPU, not the loop, waits for the copy.
Ruling CopyLagBound(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  if (!f.events || !in.device_copy) return kNotDecided;
  // The GPU's wait beyond the loop's own wait in Next() is the copy's lag.
  const Totals& t = f.t;
  const double copy_lag_share =
      t.gpu_busy + t.gpu_idle > 0
          ? t.gpu_copy_lag / (t.gpu_busy + t.gpu_idle)
          : std::max(0.0, 1 - *in.gpu_busy_events - d.consumer_wait_fraction);
  if (copy_lag_share < kWaitInputBound) return kNotDecided;
  d.verdict = Verdict::kCopyBound;
  d.stage = Stage::kCopy;
  d.headline = fmt::format(
      "copy-bound: the GPU waited {} of its time for the next batch ({}) while the loop "
      "waited only {} in Next(): batches reach the loop before their copy to the device "
      "has finished",
      Pct(1 - *in.gpu_busy_events), f.gpu_how, Pct(d.consumer_wait_fraction));
  AddCopyAdvice(in, f.batch_bytes, d);
  return {true, true};
}

// 6. Does the GPU work? The events rule out waits for data; a GPU idle inside the steps
// (waiting for the host to launch, or synchronizing) shows only in NVML's reading. The
// events count that wait for the host as busy, so a low event share is a wait for batches
// and never makes the loop host-bound: only NVML's idle reading does.
Ruling HostBound(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  if (!in.gpu_utilization || *in.gpu_utilization >= kGpuIdle) return kNotDecided;
  d.verdict = Verdict::kHostBound;
  d.gpu_busy_fraction = *in.gpu_utilization;
  d.gpu_measure = in.gpu_utilization_source;
  const std::string busy_text =
      f.events ? fmt::format(
                     "the GPU never waited long for data (busy {} between batches, {}) yet "
                     "ran kernels only {} of the time ({} utilization)",
                     Pct(*in.gpu_busy_events), f.gpu_how, Pct(*in.gpu_utilization),
                     in.gpu_utilization_source)
               : fmt::format("the GPU was busy {} ({} utilization)", Pct(d.gpu_busy_fraction),
                             in.gpu_utilization_source);
  d.headline = fmt::format(
      "host-bound training loop: {} while the loop waited only {} of its time for data; the "
      "host side of each {:.1f} ms step is the bottleneck",
      busy_text, Pct(d.consumer_wait_fraction), f.PerBatch(f.t.step));
  d.advice.push_back(
      "look for synchronizations inside the step (.item(), .cpu(), printing "
      "tensors) and remove them or move them out of the loop");
  d.advice.push_back(
      "fewer, larger kernels: a bigger batch, CUDA graphs or torch.compile "
      "cut launch overhead");
  if (auto b = BatchSizeAdvice(in)) d.advice.push_back(*b);
  return {true, f.events};
}

// 7. None of the above: the loader keeps up.
Ruling Healthy(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  d.verdict = Verdict::kHealthy;
  d.headline = f.gpu_busy
                   ? fmt::format(
                         "healthy: the loop waited {} of its time for data and the GPU was busy "
                         "{} ({}): the step is the bottleneck, as it should be",
                         Pct(d.consumer_wait_fraction), Pct(*f.gpu_busy), f.gpu_how)
                   : fmt::format(
                         "healthy: the loop waited {} of its time for data (GPU utilization "
                         "unknown: no NVML)",
                         Pct(d.consumer_wait_fraction));
  if (auto b = BatchSizeAdvice(in)) d.advice.push_back(*b);
  return {true, f.events};
}

using Rule = Ruling (*)(const DoctorInput&, const Figures&, Diagnosis&);
// Tried in order; the first that decides gives the verdict. Healthy always decides.
constexpr Rule kRules[] = {MemoryPressure, TooLittle, CpuStarved, CopyStageBound,
                           InputBound,     CopyLagBound, HostBound,  Healthy};

}  // namespace

Diagnosis Diagnose(const DoctorInput& in) {
  Diagnosis d;
  if (in.batches.empty()) {
    d.verdict = Verdict::kMeasuring;
    d.headline = "measuring: nothing measured yet; the doctor needs batches delivered";
    return d;
  }
  const doctor::Figures f = doctor::Measure(in, d);
  doctor::AddEvidence(in, f, d);
  Ruling ruling;
  for (Rule rule : kRules) {
    ruling = rule(in, f, d);
    if (ruling.decided) break;
  }
  // Whatever decided the verdict, say what the events measured when they did.
  if (d.gpu_measure == "events" && !ruling.headline_tells_events) {
    d.headline += fmt::format(
        "; the GPU waited {} of its time for the next batch (measured by events on the "
        "training stream over {} steps)",
        Pct(1 - *in.gpu_busy_events), in.gpu_event_steps);
  }
  return d;
}

}  // namespace gpufeed
