// The doctor's rules: Diagnose() computes the shared figures once (Figures), adds the
// evidence every verdict shows, then tries one function per verdict in order; the first that
// decides fills in the headline and the advice computed from the figures. The rules of memory
// pressure, too little measured, a copy lagging behind the loop, a host-bound loop and a
// healthy one are here; those where the loop waits for data are in input_rules.cc.
#include "doctor/rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "doctor/figures.h"
#include "gpufeed/doctor.h"

namespace gpufeed {
namespace {

using doctor::AddCopyAdvice;
using doctor::Figures;
using doctor::Gb;
using doctor::kDecided;
using doctor::kNotDecided;
using doctor::kWaitInputBound;
using doctor::Ms;
using doctor::Pct;
using doctor::Ruling;
using doctor::Totals;

constexpr double kGpuIdle = 0.50;     // below this GPU utilization the GPU idles
constexpr double kMemoryFull = 0.95;  // of RAM or of the cgroup limit

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

// Padded rows of a variable-length field that are more than a fifth padding: the figure, and
// packing, which wastes none.
void AddPaddingAdvice(const DoctorInput& in, Diagnosis& d) {
  const int64_t all = in.varlen_items + in.varlen_pad_items;
  if (in.varlen_items < 0 || all <= 0) return;
  const double share = static_cast<double>(in.varlen_pad_items) / static_cast<double>(all);
  if (share <= 0.20) return;
  d.advice.push_back(fmt::format(
      "{} of the rows' items are padding ({} padding items per epoch beside {} real ones): "
      "pack the field instead (pack=gpufeed.Pack(length); `gpufeed bench --pack-length`), "
      "which fills every row but the last, or whole samples at a stated fill with "
      "split=False",
      Pct(share), in.varlen_pad_items, in.varlen_items));
}

}  // namespace

namespace doctor {

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

}  // namespace doctor

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
    case Stage::kRemote:
      return "remote fetch";
  }
  return "";
}

namespace {

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
constexpr Rule kRules[] = {
    MemoryPressure,     TooLittle,    doctor::CpuStarved, doctor::CopyStageBound,
    doctor::InputBound, CopyLagBound, HostBound,          Healthy};

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
  AddPaddingAdvice(in, d);
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
