#include <fmt/format.h>

#include "cli/bench_run.h"
#include "core/format.h"

namespace gpufeed::cli {
namespace {

double Share(int64_t part_ns, double total_s) {
  return total_s > 0 ? 100.0 * static_cast<double>(part_ns) * 1e-9 / total_s : 0;
}

}  // namespace

std::string FormatProgress(const BenchProgress& p) {
  std::string line =
      p.seconds > 0
          ? fmt::format("{:.0f}/{:.0f} s  epoch {}  batch {}/{}  {} samples/s  wait {:.1f}%",
                        p.elapsed_s, p.seconds, p.epoch + 1, p.batch, p.batches_per_epoch,
                        FormatCount(p.samples_per_s), 100.0 * p.consumer_wait_fraction)
          : fmt::format("epoch {}/{}  batch {}/{}  {} samples/s  wait {:.1f}%", p.epoch + 1,
                        p.epochs, p.batch, p.batches_per_epoch, FormatCount(p.samples_per_s),
                        100.0 * p.consumer_wait_fraction);
  if (!p.status_line.empty()) line += "  | " + p.status_line;
  return line;
}

namespace {

// What ran and what it delivered: source, device, totals, throughput, groups.
std::string FormatDelivered(const BenchResult& r) {
  const LoaderStats& s = r.stats;
  std::string out;
  out += fmt::format("source      {}\n", r.source);
  out += fmt::format("device      {}   workers {}   prefetch {}   buffers {} x {}\n", r.device,
                     s.workers, s.prefetch, s.buffers, FormatBytes(s.buffer_bytes));
  out += fmt::format("delivered   {} samples in {} batches over {} epoch(s), {:.2f} s\n",
                     FormatCount(r.samples), s.batches, r.epochs, r.wall_s);
  out += fmt::format("throughput  {} samples/s   {}/s\n", FormatCount(r.samples_per_s),
                     FormatBytes(r.bytes_per_s));
  if (r.groups > 0) {
    out += fmt::format(
        "groups      {} files/s ({} groups per epoch, whole in packed batches); "
        "fill {:.4f} of the batches' capacity\n",
        FormatCount(r.groups_per_s), FormatCount(static_cast<double>(r.groups)), r.pack_fill);
  }
  return out;
}

// The run against its two ceilings, and the epochs after the first against them.
std::string FormatCeilings(const BenchResult& r) {
  const LoaderStats& s = r.stats;
  std::string out;
  if (r.ceiling_bytes_per_s > 0) {
    out += fmt::format(
        "ceiling     {} samples/s   {}/s  (memcpy of the same bytes, {} threads, same run)\n",
        FormatCount(r.ceiling_samples_per_s), FormatBytes(r.ceiling_bytes_per_s), s.workers);
    out += fmt::format("ratio       {:.2f} of the ceiling\n", r.ratio_to_ceiling);
  }
  if (r.same_work_samples_per_s > 0) {
    out += fmt::format(
        "same work   {} samples/s   {}/s  (the same shuffled rows read by {} threads without "
        "the loader, same run; {})\n",
        FormatCount(r.same_work_samples_per_s), FormatBytes(r.same_work_bytes_per_s), s.workers,
        r.same_work_fresh_opening ? "from a new opening of the source: its first touch paid, "
                                    "as the loader's was"
                                  : "from the loader's source, warmed by the run");
    out += fmt::format("ratio       {:.2f} of the same work (1.00: the loader adds nothing)\n",
                       r.ratio_to_same_work);
  }
  if (r.later_samples_per_s > 0) {
    // Against the ceilings on memory the run warmed (the memcpy's, the same work on the
    // loader's own source): like with like once the process's first touch of the source and
    // its buffers is behind it.
    std::string ratios;
    if (r.later_ratio_to_ceiling > 0) {
      ratios = fmt::format(": {:.2f} of the ceiling", r.later_ratio_to_ceiling);
      if (r.later_ratio_to_same_work > 0) {
        ratios +=
            fmt::format(", {:.2f} of the same work on warm memory ({} samples/s)",
                        r.later_ratio_to_same_work, FormatCount(r.same_work_warm_samples_per_s));
      }
    }
    out += fmt::format("later       {} samples/s over epochs 2-{}{} (the first took {:.2f} s)\n",
                       FormatCount(r.later_samples_per_s), r.epochs, ratios, r.first_epoch_s);
  }
  return out;
}

// The fresh batch memory the run faulted in; "" when it reused an earlier loader's.
std::string FormatFirstTouch(const BenchResult& r) {
  if (r.fresh_batch_memory_bytes <= 0) return "";
  // The rate tells the two costs apart: the kernel zeroing a page runs at memset speed; a
  // VM's host backing memory it has not yet given (or took back) runs at well under 1 GB/s.
  const std::string rate =
      r.fresh_batch_memory_s > 0
          ? FormatBytes(static_cast<double>(r.fresh_batch_memory_bytes) / r.fresh_batch_memory_s) +
                "/s: "
          : "";
  return fmt::format(
      "first touch {} of fresh batch memory faulted in, {:.2f} worker-seconds ({}the "
      "kernel zeroes each page, and on a VM the host may have to back it first; a later "
      "loader in this process reuses it)\n",
      FormatBytes(static_cast<double>(r.fresh_batch_memory_bytes)), r.fresh_batch_memory_s, rate);
}

// Where the time went: start-up, the consumer's wait, the (simulated) GPU, the workers.
std::string FormatTimes(const BenchResult& r) {
  const LoaderStats& s = r.stats;
  const double worker_s = r.wall_s * s.workers;  // worker-seconds available
  std::string out;
  out += fmt::format("first batch {:.3f} s after the first Next(); loader set up in {:.3f} s\n",
                     r.time_to_first_batch_s, r.setup_s);
  out += fmt::format("consumer    waited {:.1f}% of its time in Next()\n",
                     100.0 * r.consumer_wait_fraction);
  if (r.step_ms > 0) {
    out += fmt::format(
        "gpu (sim.)  busy {:.1f}% of wall time from the first batch ({:.1f}% counting start-up), "
        "step {} ms\n",
        100.0 * r.gpu_busy_fraction, 100.0 * r.gpu_busy_fraction_with_startup, r.step_ms);
    if (r.later_gpu_busy_fraction >= 0) {
      out += fmt::format("            busy {:.1f}% over epochs 2-{} (the first epoch apart)\n",
                         100.0 * r.later_gpu_busy_fraction, r.epochs);
    }
    // Only a run longer than the window has a "last 5 s" apart from the whole.
    if (r.gpu_busy_fraction_final >= 0 && r.wall_s > 6) {
      out += fmt::format("            busy {:.1f}% over the run's last 5 s\n",
                         100.0 * r.gpu_busy_fraction_final);
    }
  }
  if (s.gpu_steps > 0) {
    out += fmt::format(
        "gpu events  busy {} of the GPU's time, waited {:.2f} ms per step for the next "
        "batch ({} steps timed on the consumer stream)\n",
        s.GpuBusyFraction() >= 0 ? fmt::format("{:.1f}%", 100.0 * s.GpuBusyFraction()) : "n/a",
        1e-6 * static_cast<double>(s.gpu_idle_ns) / s.gpu_steps, s.gpu_steps);
  }
  out += fmt::format(
      "workers     read {:.0f}%  transform {:.0f}%  copy {:.0f}%  waiting for a buffer {:.0f}% "
      "of {:.2f} worker-seconds\n",
      Share(s.read_ns, worker_s), Share(s.transform_ns, worker_s), Share(s.copy_ns, worker_s),
      Share(s.buffer_wait_ns, worker_s), worker_s);
  return out;
}

// Memory against its bound, an HDF5 source's decoded-chunk caches, and the padding of rows
// made of a variable-length field.
std::string FormatMemory(const BenchResult& r) {
  std::string out;
  out += fmt::format("memory      peak RSS {} (anonymous {}; bound {})\n",
                     FormatBytes(static_cast<double>(r.peak_rss_bytes)),
                     FormatBytes(static_cast<double>(r.peak_anon_rss_bytes)),
                     FormatBytes(static_cast<double>(r.bound_anon_rss_bytes)));
  if (r.hdf5_chunks_decoded >= 0 && r.hdf5_chunks_decoded + r.hdf5_chunk_cache_hits > 0) {
    const int64_t uses = r.hdf5_chunks_decoded + r.hdf5_chunk_cache_hits;
    out += fmt::format(
        "chunks      {} decoded, {} served by the decoded-chunk caches ({:.0f}% "
        "hits; budget {})\n",
        FormatCount(static_cast<double>(r.hdf5_chunks_decoded)),
        FormatCount(static_cast<double>(r.hdf5_chunk_cache_hits)),
        100.0 * static_cast<double>(r.hdf5_chunk_cache_hits) / uses,
        FormatBytes(static_cast<double>(r.hdf5_chunk_cache_bytes)));
  }
  const SourceStats& from = r.stats.source;
  if (from.varlen_items >= 0) {
    const int64_t all = from.varlen_items + from.varlen_pad_items;
    out += fmt::format("padding     {:.1f}% of the rows' items per epoch ({} items, {} of "
                       "padding, {} cut from long samples)\n",
                       all > 0 ? 100.0 * static_cast<double>(from.varlen_pad_items) / all : 0.0,
                       FormatCount(static_cast<double>(from.varlen_items)),
                       FormatCount(static_cast<double>(from.varlen_pad_items)),
                       FormatCount(static_cast<double>(from.varlen_truncated_items)));
  }
  return out;
}

// What served the samples at the end of the run and what the loader did by itself, from its
// stats: the cache tier, how far a copy made while it ran had come, the remedies it took; ""
// when it read the source with nothing done to it.
std::string FormatServing(const LoaderStats& s) {
  const SourceStats& from = s.source;
  std::string out;
  if (from.cache_tier != CacheTier::kNone || from.cache_built_fraction >= 0) {
    out += fmt::format("serving     {}", from.cache_tier == CacheTier::kNone
                                             ? std::string_view("the source")
                                             : CacheTierName(from.cache_tier));
    if (from.cache_built_fraction >= 0) {
      out += fmt::format(" (a copy made while it ran: {:.0f}% built)",
                         100 * from.cache_built_fraction);
    }
    out += "\n";
  }
  if (!s.actions.empty()) out += "remedies    the loader took the doctor's advice itself:\n";
  for (const auto& action : s.actions) out += fmt::format("  - {}\n", action);
  return out;
}

// The autotuner's final values and its changes; "" when it changed nothing.
std::string FormatTuning(const LoaderStats& s) {
  if (s.tuning_log.empty()) return "";
  std::string out = fmt::format("autotuner   ended at workers {}, prefetch {}; its changes:\n",
                                s.workers, s.prefetch);
  for (const auto& change : s.tuning_log) out += fmt::format("  - {}\n", change);
  return out;
}

}  // namespace

std::string FormatBenchReport(const BenchResult& r) {
  std::string out = FormatDelivered(r) + FormatCeilings(r) + FormatFirstTouch(r) + FormatTimes(r) +
                    FormatMemory(r) + FormatServing(r.stats) + FormatTuning(r.stats);
  if (!r.diagnosis_text.empty()) out += "\n" + r.diagnosis_text;
  return out;
}

}  // namespace gpufeed::cli
