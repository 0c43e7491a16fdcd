// The rules of the verdicts where the loop waits for data: CPU-starved (the loader's threads
// runnable without a CPU), copy-bound (the copy to the device is the stage waited on) and
// input-bound (the read or the transforms, and why: storage, memory copies, a saturated CPU,
// samples cut into many chunks), with the cache advice they give.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "doctor/figures.h"
#include "doctor/rules.h"
#include "gpufeed/doctor.h"

namespace gpufeed::doctor {
namespace {

constexpr double kCpuSaturated = 0.90;  // of the usable cores
// Reads are storage-bound only when the process fetched at least this share of the bytes it
// delivered from a device; below it the reads were served by the page cache or memory.
constexpr double kFromStorage = 0.10;
// The loop's wait counts as CPU starvation when the loader's threads on its path spent at
// least this share of it runnable without a CPU.
constexpr double kStarvedShare = 0.5;
// A sample cut into at least this many pieces by the file's chunks gets layout advice.
constexpr int64_t kManyPieces = 4;

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

// Reads of remote data: the workers wait on the store's requests. Throttling (503, 429) asks
// for fewer requests; a full request cap for more; otherwise the store's latency bounds the
// reads, and a node-local cache takes the epochs after the first off the network.
void RemoteBound(const DoctorInput& in, double stage_busy, Diagnosis& d) {
  const RemoteStats& r = in.remote;
  d.stage = Stage::kRemote;
  d.headline = fmt::format(
      "input-bound on remote fetch: the loop waited {} of its time for data; the workers spend "
      "{} of their time in reads from the store ({} requests, mean {:.0f} ms, p99 {:.0f} ms, "
      "up to {} of {} in flight)",
      Pct(d.consumer_wait_fraction), Pct(stage_busy), r.requests, 1e3 * r.latency_mean_s,
      1e3 * r.latency_p99_s, r.max_in_flight, r.max_requests);
  d.evidence.push_back(fmt::format("{} retries, {} throttled (503/429), {} failed; {} received",
                                   r.retries, r.throttled, r.failed,
                                   Gb(static_cast<double>(r.bytes))));
  if (r.throttled > 0 && 20 * r.throttled >= r.requests) {
    d.advice.push_back(fmt::format(
        "the store throttles ({} x 503/429 in {} requests): lower max_requests (now {}) or "
        "cache on the node (cache=\"disk\")",
        r.throttled, r.requests, r.max_requests));
  } else if (r.max_in_flight >= r.max_requests && r.max_requests > 0) {
    d.advice.push_back(
        fmt::format("every request slot was in use ({} in flight): raise max_requests to {} "
                    "(gpufeed.set_remote_options)",
                    r.max_in_flight, 2 * r.max_requests));
  } else {
    d.advice.push_back(fmt::format(
        "the store's latency (p99 {:.0f} ms) bounds the reads: more workers keep more requests "
        "in flight",
        1e3 * r.latency_p99_s));
  }
  if (in.cache == CacheTier::kNone) {
    d.advice.push_back(
        "cache=\"disk\" (or \"shm\", \"ram\" where the set fits) serves the epochs after the "
        "first from this node instead of the network");
  }
}

void ReadBound(const DoctorInput& in, const Figures& f, const CpuPicture& cpu, double stage_busy,
               Diagnosis& d) {
  if (in.remote.requests > 0 && !cpu.saturated) {
    RemoteBound(in, stage_busy, d);
    return;
  }
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
      "so a chunk holds whole samples (`gpufeed rechunk IN.h5 OUT.h5` rewrites every dataset "
      "so), or cache='ram'/'shm' (built once, it stores whole rows)",
      in.pieces_field, in.source_pieces_per_sample, fmt::join(in.pieces_chunk_shape, ", "),
      in.source_pieces_per_sample, fmt::join(whole, ", "));
}

}  // namespace

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
              ? fmt::format(
                    "this process uses only {:.2f} of {:.0f} cores: other processes "
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

}  // namespace gpufeed::doctor
