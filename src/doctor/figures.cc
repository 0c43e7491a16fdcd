#include "doctor/figures.h"

#include <algorithm>

#include "core/system/system_memory.h"

namespace gpufeed::doctor {
namespace {

std::optional<double> RamBudget(const DoctorInput& in) {
  if (!in.ram_available_bytes) return {};
  double available = static_cast<double>(*in.ram_available_bytes);
  if (in.cgroup_memory_limit_bytes && in.cgroup_memory_used_bytes) {
    available = std::min(available, static_cast<double>(*in.cgroup_memory_limit_bytes) -
                                        static_cast<double>(*in.cgroup_memory_used_bytes));
  }
  return kRamBudgetShare * std::max(0.0, available);
}

}  // namespace

Totals Sum(const std::vector<BatchTiming>& batches) {
  Totals t;
  for (const auto& b : batches) {
    t.n += 1;
    t.rows += static_cast<double>(b.rows);
    t.wait += static_cast<double>(b.consumer_wait_ns);
    t.step += static_cast<double>(b.step_ns);
    t.read += static_cast<double>(b.read_ns);
    t.transform += static_cast<double>(b.transform_ns);
    t.copy += static_cast<double>(b.copy_ns);
    t.buffer_wait += static_cast<double>(b.buffer_wait_ns);
    t.waited_queued += static_cast<double>(b.waited_queued_ns);
    t.waited_buffer += static_cast<double>(b.waited_buffer_ns);
    t.waited_read += static_cast<double>(b.waited_read_ns);
    t.waited_transform += static_cast<double>(b.waited_transform_ns);
    t.waited_copy += static_cast<double>(b.waited_copy_ns);
    t.waited_handoff += static_cast<double>(b.waited_handoff_ns);
    if (b.consumer_runqueue_ns >= 0 && b.worker_runqueue_ns >= 0) {
      const double build =
          b.build_wall_ns > 0 ? static_cast<double>(b.build_wall_ns)
                              : static_cast<double>(b.buffer_wait_ns + b.read_ns +
                                                    b.transform_ns + b.copy_ns);
      const double on_path = static_cast<double>(b.waited_buffer_ns + b.waited_read_ns +
                                                 b.waited_transform_ns + b.waited_copy_ns);
      const double worker_share =
          build > 0 ? static_cast<double>(b.worker_runqueue_ns) * std::min(1.0, on_path / build)
                    : 0.0;
      const double wait = static_cast<double>(b.consumer_wait_ns);
      t.starved += std::min(wait, static_cast<double>(b.consumer_runqueue_ns) + worker_share);
      t.runqueue_batches += 1;
      t.wait_with_runqueue += wait;
    }
    if (b.gpu_busy_ns >= 0 && b.gpu_idle_ns >= 0) {
      t.gpu_busy += static_cast<double>(b.gpu_busy_ns);
      t.gpu_idle += static_cast<double>(b.gpu_idle_ns);
      t.gpu_loop_wait += static_cast<double>(b.consumer_wait_ns);
      t.gpu_copy_lag +=
          static_cast<double>(std::max<int64_t>(0, b.gpu_idle_ns - b.consumer_wait_ns));
    }
  }
  return t;
}

Figures Measure(const DoctorInput& in, Diagnosis& d) {
  Figures f;
  f.t = Sum(in.batches);
  f.consumer = f.t.wait + f.t.step;
  f.workers = std::max(1, in.workers);
  d.consumer_wait_fraction = f.consumer > 0 ? f.t.wait / f.consumer : 0;
  d.batches = static_cast<int64_t>(f.t.n);
  d.measured_seconds = f.ConsumerSeconds();
  if (f.t.wait_with_runqueue > 0) d.starved_fraction = f.t.starved / f.t.wait_with_runqueue;
  if (const double w = f.t.WaitedTotal(); w > 0) {
    d.wait_path = {{"queued", f.t.waited_queued / w},       {"buffer", f.t.waited_buffer / w},
                   {"read", f.t.waited_read / w},           {"transform", f.t.waited_transform / w},
                   {"copy", f.t.waited_copy / w},           {"handoff", f.t.waited_handoff / w}};
  }
  // At most 1: the window's batches may have been read before it began (prefetched while
  // the loader started, or while the loop stepped), and over a window of a batch or two that
  // made a figure of thousands of percent.
  d.worker_busy_fraction =
      f.consumer > 0
          ? std::min(1.0, (f.t.read + f.t.transform + f.t.copy) / (f.workers * f.consumer))
          : 0;
  f.usable =
      in.cpu_limit_cores ? std::min<double>(in.cpu_count, *in.cpu_limit_cores) : in.cpu_count;
  f.batch_bytes = in.sample_bytes * static_cast<double>(in.batch_size);
  f.set_bytes = in.sample_bytes * static_cast<double>(in.dataset_samples);
  f.ram_budget = RamBudget(in);
  // The GPU's busy share: events on the training stream when the loop named it (exact about
  // waits for data), else NVML or a simulated step. Either way the text says which.
  // Events over a step or two say little (the first steps, a restart): they must cover enough
  // of the window, else NVML decides.
  f.min_event_steps =
      std::max<int64_t>(kMinEventSteps, static_cast<int64_t>(in.batches.size()) / 2);
  f.events = in.gpu_busy_events && in.gpu_event_steps >= f.min_event_steps;
  f.gpu_busy = f.events ? in.gpu_busy_events : in.gpu_utilization;
  if (f.gpu_busy) {
    d.gpu_busy_fraction = *f.gpu_busy;
    d.gpu_measure = f.events ? "events" : in.gpu_utilization_source;
  }
  f.gpu_how = f.events ? fmt::format("measured by events on the training stream over {} steps",
                                     in.gpu_event_steps)
                       : fmt::format("{} utilization", in.gpu_utilization_source);
  return f;
}

void AddEvidence(const DoctorInput& in, const Figures& f, Diagnosis& d) {
  const Totals& t = f.t;
  d.evidence.push_back(fmt::format(
      "over the last {} batches: the loop waited {} of its time in Next() ({:.1f} ms per batch) "
      "and stepped {:.1f} ms per batch",
      static_cast<int>(t.n), Pct(d.consumer_wait_fraction), f.PerBatch(t.wait),
      f.PerBatch(t.step)));
  d.evidence.push_back(fmt::format(
      "per batch, summed over {} worker(s): read {:.1f} ms, transform {:.1f} ms, copy {:.1f} ms, "
      "waiting for a buffer {:.1f} ms; workers {} busy",
      f.workers, f.PerBatch(t.read), f.PerBatch(t.transform), f.PerBatch(t.copy),
      f.PerBatch(t.buffer_wait), Pct(d.worker_busy_fraction)));
  if (t.WaitedTotal() > 0) {
    const double w = t.WaitedTotal();
    d.evidence.push_back(fmt::format(
        "while the loop waited, its batch was: not yet taken by a worker {}, waiting for a "
        "buffer {}, being read {}, transformed {}, copied {}, ready but not yet handed over {}",
        Pct(t.waited_queued / w), Pct(t.waited_buffer / w), Pct(t.waited_read / w),
        Pct(t.waited_transform / w), Pct(t.waited_copy / w), Pct(t.waited_handoff / w)));
  }
  if (t.runqueue_batches > 0 && t.wait_with_runqueue > 0) {
    d.evidence.push_back(fmt::format(
        "the loader's threads on that path were runnable but had no CPU for {} of the wait "
        "({:.1f} ms per batch)",
        Pct(t.starved / t.wait_with_runqueue), Ms(t.starved / t.runqueue_batches)));
  }
  if (in.warmup_batches > 0) {
    d.evidence.push_back(fmt::format(
        "the first {} batch(es) after start-up took {:.2f} s (threads, buffers, first reads) "
        "and are not judged",
        in.warmup_batches, in.warmup_seconds));
  }
  if (in.process_cpu_cores) {
    d.evidence.push_back(fmt::format("the process used {:.2f} of {:.1f} usable cores",
                                     *in.process_cpu_cores, f.usable));
  }
  if (in.gpu_busy_events && !f.events) {
    d.evidence.push_back(fmt::format(
        "events on the training stream timed only {} of {} steps (at least {} needed): too few "
        "to judge by; {}",
        in.gpu_event_steps, static_cast<int>(t.n), f.min_event_steps,
        in.gpu_utilization ? fmt::format("{} utilization decides", in.gpu_utilization_source)
                           : std::string("no other GPU reading")));
  }
  if (f.events) {
    d.evidence.push_back(
        fmt::format("the GPU was busy {} of its time and waited for the next batch {} ({})",
                    Pct(*in.gpu_busy_events), Pct(1 - *in.gpu_busy_events), f.gpu_how));
    if (in.gpu_drained_steps > 0) {
      d.evidence.push_back(fmt::format(
          "in {} of {} steps the stream had run out of work before the loop asked for the "
          "next batch (a synchronization in the step, or host work outlasting the GPU's): "
          "the GPU waited for the host there, a wait the events count as busy",
          in.gpu_drained_steps, static_cast<int>(t.n)));
    }
  }
  if (in.gpu_utilization) {
    d.evidence.push_back(fmt::format("GPU utilization {} ({})", Pct(*in.gpu_utilization),
                                     in.gpu_utilization_source));
  }
}

}  // namespace gpufeed::doctor
