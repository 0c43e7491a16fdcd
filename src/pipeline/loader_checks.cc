#include "pipeline/loader_checks.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/format.h"
#include "core/log.h"
#include "core/system/system_memory.h"
#include "gpufeed/error.h"

namespace gpufeed {

SamplerOptions ToSamplerOptions(const LoaderOptions& o, const Source& source) {
  SamplerOptions s;
  s.batch_size = o.batch_size;
  s.shuffle = o.shuffle;
  s.seed = o.seed;
  s.drop_last = o.drop_last;
  s.pad = o.pad;
  s.rank = o.rank;
  s.world_size = o.world_size;
  s.shuffle_block =
      o.shuffle_block < 0 ? std::max<int64_t>(1, source.PreferredBlock()) : o.shuffle_block;
  s.shuffle_window = o.shuffle_window;
  s.groups = o.groups;
  s.pack_window = o.pack_window;
  return s;
}

LoaderOptions CheckOptions(LoaderOptions o) {
  if (o.workers < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("workers must be >= 0 (0 = automatic), got {}", o.workers));
  }
  if (o.prefetch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("prefetch must be >= 0 (0 = automatic), got {}", o.prefetch));
  }
  if (o.max_outstanding < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("max_outstanding must be >= 1, got {}", o.max_outstanding));
  }
  if (o.trace_batches < -1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("trace_batches must be >= -1 (0 = the last minute, -1 = off), got {}",
                            o.trace_batches));
  }
  if (o.groups && !o.pack) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("groups ({}) are delivered in packed batches of whole groups: set "
                            "pack=true",
                            o.groups->name()));
  }
  if (o.pack && !o.groups) {
    throw Error(ErrorCode::kInvalidArgument,
                "pack=true packs groups into batches: declare the groups (a per-row group id "
                "field or a group offsets dataset)");
  }
  if (o.start_epoch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("start_epoch must be >= 0, got {}", o.start_epoch));
  }
  if (o.max_workers < 0 || o.max_prefetch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("max_workers and max_prefetch must be >= 0 (0 = automatic), got {} "
                            "and {}",
                            o.max_workers, o.max_prefetch));
  }
  // More threads than this only contend: cap what was asked, and say so (a typo such as
  // workers=1000 would otherwise start a thousand threads on a 2-core machine).
  const int cpus = UsableCpus();
  const int most_workers = std::max(16, 4 * cpus);
  if (o.workers > most_workers || o.max_workers > most_workers) {
    Log(LogLevel::kWarning,
        fmt::format("workers={} (max_workers={}) is more than 4 threads per usable CPU ({} "
                    "CPUs): using {} at most",
                    o.workers, o.max_workers, cpus, most_workers));
    o.workers = std::min(o.workers, most_workers);
    o.max_workers = std::min(o.max_workers, most_workers);
  }
  // The default starts within a given max_workers (as the default prefetch does within
  // max_prefetch: DefaultPrefetch); an explicit workers above it raises the max instead.
  if (o.workers == 0) {
    o.workers = std::min(4, cpus);
    if (o.max_workers > 0) o.workers = std::min(o.workers, o.max_workers);
  }
  // A placeholder: the Loader sets DefaultPrefetch once the batch's bytes are known.
  if (o.prefetch == 0) o.prefetch = 2 * o.workers;
  if (o.max_workers == 0) o.max_workers = o.autotune ? UsableCpus() : o.workers;
  o.max_workers = std::max(o.max_workers, o.workers);
  // max_prefetch == 0 is resolved once the batch size in bytes is known (RAM budget).
  if (!o.device) o.device = HostDevice();
  return o;
}

int DefaultPrefetch(int workers, size_t batch_bytes, int max_prefetch) {
  const int64_t by_workers = 2 * int64_t{std::max(1, workers)};
  const auto by_bytes = static_cast<int64_t>(
      std::min<size_t>(kDefaultPrefetchBytes / std::max<size_t>(1, batch_bytes), 1 << 16));
  const auto depth = static_cast<int>(std::min(by_workers, std::max<int64_t>(2, by_bytes)));
  return max_prefetch > 0 ? std::min(depth, max_prefetch) : depth;
}

// Prefetched batches are memory: under the autotuner, keep the deepest it may go within a
// quarter of the RAM available now.
void ResolveMaxPrefetch(LoaderOptions& o, size_t buffer_bytes) {
  if (o.max_prefetch == 0) {
    if (o.autotune) {
      const uint64_t budget = HostDevice()->MemoryInfo().free_bytes / 4;
      const auto fit =
          static_cast<int>(std::min<uint64_t>(budget / std::max<size_t>(1, buffer_bytes), 1 << 16));
      o.max_prefetch = std::max(1, std::min(4 * o.max_workers, fit));
    } else {
      o.max_prefetch = o.prefetch;
    }
  }
  o.max_prefetch = std::max(o.max_prefetch, o.prefetch);
}

// A full shuffle over compressed chunks decodes a chunk for every few samples read: often
// 50-140x slower than block shuffle. Estimates the decodes per epoch and, past ~4 per chunk,
// says so once with the fixes that apply.
void AdviseOnShuffle(const Source& source, const Sampler& sampler) {
  const SourceChunking c = source.chunking();
  const SamplerOptions& o = sampler.options();
  if (o.groups || !c.compressed || !o.shuffle || o.shuffle_block != 0 || c.samples_per_chunk <= 1 ||
      sampler.batches_per_epoch() == 0 || c.decoded_chunk_bytes <= 0) {
    return;
  }
  const double chunks =
      std::ceil(static_cast<double>(source.size()) / static_cast<double>(c.samples_per_chunk));
  const double rows = static_cast<double>(
      std::min<int64_t>(o.batch_size, std::max<int64_t>(1, sampler.shard_size())));
  // Distinct chunks a batch of random samples touches, and the share the workers find decoded
  // (their shared cache keeps the first chunks met, up to the budget).
  const double per_batch = chunks * (1.0 - std::pow(1.0 - 1.0 / chunks, rows));
  const double kept =
      static_cast<double>(c.cache_bytes) / static_cast<double>(c.decoded_chunk_bytes);
  const double hit = std::min(1.0, kept / chunks);
  const double decodes = static_cast<double>(sampler.batches_per_epoch()) * per_batch * (1.0 - hit);
  if (decodes <= 4.0 * chunks) return;
  int64_t data = 0;
  for (const auto& f : source.schema().fields) {
    data += source.size() * static_cast<int64_t>(f.SampleBytes());
  }
  const uint64_t budget = RamBudgetBytes();
  const std::string cache =
      static_cast<uint64_t>(data) <= budget
          ? fmt::format(
                "; or cache the decoded data set (cache=\"ram\" or \"shm\": {}, "
                "within the RAM budget of {})",
                FormatBytes(static_cast<double>(data)), FormatBytes(static_cast<double>(budget)))
          : "";
  Log(LogLevel::kWarning,
      fmt::format("{}: a full shuffle over compressed chunks of {} samples decodes each chunk "
                  "about {:.0f} times an epoch ({:.0f} decodes of {:.0f} chunks): block "
                  "shuffle (shuffle_block=-1, CLI --block-shuffle) decodes each about once{}",
                  source.Describe(), c.samples_per_chunk, decodes / chunks, decodes, chunks,
                  cache));
}

const Source& CheckSource(const std::shared_ptr<Source>& source) {
  if (!source) throw Error(ErrorCode::kInvalidArgument, "the loader needs a source, got null");
  return *source;
}

// The shuffle mode as LoaderState records it. "keyed-": the order is the keyed permutation
// computed per position (sampler_permutation.h); states that say "full" or "block:..." were
// saved over the earlier, materialised order.
std::string ShuffleMode(const Sampler& sampler) {
  const SamplerOptions& o = sampler.options();
  if (o.groups) return fmt::format("packed:{}:{}", o.shuffle ? "shuffle" : "none", o.pack_window);
  if (!o.shuffle) return "none";
  if (o.shuffle_block == 0) return "keyed-full";
  return fmt::format("keyed-block:{}:{}", o.shuffle_block, o.shuffle_window);
}

namespace {

// A state saved mid-epoch over the earlier shuffled order cannot resume in the keyed order:
// the rest of its epoch would repeat some samples and skip others. At an epoch's start no
// sample of the epoch has been seen, so the new order serves it exactly. States saved before
// the shuffle was recorded at all are taken as saved over the earlier order.
void CheckShuffle(const LoaderState& state, const Sampler& sampler) {
  const SamplerOptions& o = sampler.options();
  const std::string now = ShuffleMode(sampler);
  const std::string saved = state.shuffle.value_or("");
  const bool earlier_order =
      saved == "full" || saved.rfind("block:", 0) == 0 || (saved.empty() && o.shuffle && !o.groups);
  if (!earlier_order) {
    if (!saved.empty() && saved != now) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot restore loader state: it was saved with shuffle {}, this "
                              "loader has {}",
                              saved, now));
    }
    return;
  }
  if (!saved.empty() && fmt::format("keyed-{}", saved) != now) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot restore loader state: it was saved with shuffle {}, this "
                            "loader has {}",
                            saved, now));
  }
  if (state.batch != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot restore loader state: it was saved at batch {} of epoch {} "
                            "by an earlier gpufeed, whose shuffled order differs from this one's; "
                            "resuming there would repeat some samples and skip others. Resume "
                            "from the start of an epoch (batch 0) instead",
                            state.batch, state.epoch));
  }
}

}  // namespace

std::optional<std::string> DataFingerprint(const Source& source) {
  const int64_t n = source.size();
  if (n <= 0 || source.device_rows() != nullptr) return std::nullopt;
  const Schema& schema = source.schema();
  const std::vector<int64_t> rows =
      n >= 3 ? std::vector<int64_t>{0, n / 2, n - 1} : std::vector<int64_t>{0, n - 1};
  std::vector<std::vector<std::byte>> fields(schema.fields.size());
  BatchView view;
  view.rows = static_cast<int64_t>(rows.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    fields[f].resize(schema.fields[f].SampleBytes() * rows.size());
    view.fields.push_back(fields[f].data());
  }
  try {
    const auto state = source.NewWorkerState();
    source.Read(rows, view, state.get());
  } catch (const Error&) {
    return std::nullopt;  // a read that fails here fails in the workers too, and says why there
  }
  XXH3_state_t* h = XXH3_createState();
  if (h == nullptr) return std::nullopt;
  XXH3_64bits_reset(h);
  for (const auto& bytes : fields) XXH3_64bits_update(h, bytes.data(), bytes.size());
  const uint64_t digest = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return fmt::format("xxh3:{:016x}", digest);
}

// Throws Error(kInvalidArgument) unless `state` was saved by a loader like this one (the rank and
// world size aside: ResumeAt decides) and names a position.
void CheckRestorable(const LoaderState& state, const LoaderOptions& options, const Sampler& sampler,
                     const Source& source) {
  const auto mismatch = [](std::string_view what, auto saved, auto now) {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("cannot restore loader state: it was saved with {} {}, this "
                             "loader has {}",
                             what, saved, now));
  };
  if (state.seed != options.seed) throw mismatch("seed", state.seed, options.seed);
  if (state.batch_size != options.batch_size) {
    throw mismatch("batch_size", state.batch_size, options.batch_size);
  }
  if (state.samples && *state.samples != sampler.num_samples()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot restore loader state: it was saved over a data set of {} "
                            "samples, this loader reads {} ({}): another file?",
                            *state.samples, sampler.num_samples(), source.Describe()));
  }
  if (state.schema && *state.schema != source.schema().ToString()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot restore loader state: it was saved over fields {}, this "
                            "loader reads {} ({}): another file?",
                            *state.schema, source.schema().ToString(), source.Describe()));
  }
  if (state.data) {
    const std::optional<std::string> here = DataFingerprint(source);
    if (here && *here != *state.data) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot restore loader state: it was saved over other data (the "
                              "first, middle and last samples hash to {} there and {} in {}): "
                              "another file of the same length and fields?",
                              *state.data, *here, source.Describe()));
    }
  }
  CheckShuffle(state, sampler);
  if (state.drop_last && *state.drop_last != sampler.options().drop_last) {
    throw mismatch("drop_last", *state.drop_last, sampler.options().drop_last);
  }
  if (state.pad && *state.pad != sampler.options().pad) {
    throw mismatch("pad", *state.pad, sampler.options().pad);
  }
  if (state.epoch < 0 || state.batch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot restore loader state: batch {} of epoch {} is no position",
                            state.batch, state.epoch));
  }
}

}  // namespace gpufeed
