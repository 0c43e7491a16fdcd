// The doctor's safe advice, taken by the loader: see gpufeed/remedies.h.
#include "gpufeed/remedies.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "cache/deferred_cache.h"
#include "core/format.h"
#include "core/log.h"
#include "core/system/system_memory.h"
#if GPUFEED_WITH_HDF5
#include "gpufeed/hdf5.h"
#endif

namespace gpufeed {
namespace {

// Below this share of its time waiting, the loop is not worth a copy of the data set.
constexpr double kMinWait = 0.10;
// The shortest time between two looks at the loader.
constexpr std::chrono::milliseconds kMinLookGap{250};

double ShareOf(const Diagnosis& d, std::string_view stage) {
  for (const auto& [name, share] : d.wait_path) {
    if (name == stage) return share;
  }
  return 0;
}

struct RemedyState {
  RemedyOptions options;
  int64_t steps = 0;  // since the last look
  std::chrono::steady_clock::time_point last_look = std::chrono::steady_clock::now();
  bool tried = false;  // the remedies were applied (or refused): once per loader
};

// Applies the first remedy that takes: a copy of the set, else a larger chunk cache. Each is
// tried once; a refusal is logged once, with its reason.
void Apply(Loader& loader, const RemedyOptions& options, const std::string& evidence) {
  const int64_t batch = loader.stats().batches;
  std::string why;
  if (options.start_cache) {
    const std::string started = options.start_cache(&why);
    if (!started.empty()) {
      std::string action =
          fmt::format("batch {}: {}; building {} in the background", batch, evidence, started);
      Log(LogLevel::kInfo, action);
      loader.RecordAction(std::move(action));
      return;
    }
    Log(LogLevel::kInfo,
        fmt::format("batch {}: {}; not copying the data set: {}", batch, evidence, why));
  }
  if (options.grow_chunk_cache) {
    const std::string grown = options.grow_chunk_cache(&why);
    if (!grown.empty()) {
      std::string action = fmt::format("batch {}: {}; {}", batch, evidence, grown);
      Log(LogLevel::kInfo, action);
      loader.RecordAction(std::move(action));
    }
  }
}

void Check(Loader& loader, RemedyState& state) {
  if (state.tried || (!state.options.start_cache && !state.options.grow_chunk_cache)) return;
  // A look every few steps, or every few seconds when steps are slow (a starved loader); at
  // most four a second, so that small, fast batches do not pay for the doctor.
  const auto now = std::chrono::steady_clock::now();
  const auto since = now - state.last_look;
  const bool due = (++state.steps >= state.options.check_every_steps && since >= kMinLookGap) ||
                   since >= std::chrono::duration<double>(state.options.check_every_s);
  if (!due) return;
  state.steps = 0;
  state.last_look = now;
  const Diagnosis diagnosis = Diagnose(CollectDoctorInput(loader, nullptr));
  if (const std::optional<std::string> evidence = CacheRemedyEvidence(diagnosis)) {
    state.tried = true;
    Apply(loader, state.options, *evidence);
  }
}

// `source`: the data the loader's deferred copy would copy (its base), which the loader reads
// until a copy serves.
std::string GrowChunkCache(const Source& source, std::string* why) {
#if !GPUFEED_WITH_HDF5
  (void)source;
  *why = "no HDF5 support in this build, so no decoded-chunk cache";
  return {};
#else
  if (!IsHdf5Source(source) || !source.chunking().compressed) {
    *why = "no compressed HDF5 chunks to keep decoded";
    return {};
  }
  const Hdf5ChunkCacheSize size = Hdf5ChunkCacheOf(source);
  const uint64_t target = std::min<uint64_t>(size.decoded_bytes, AvailableRamBytes() / 4);
  if (target <= size.budget) {
    *why = fmt::format("the chunk cache ({}) already holds what fits",
                       FormatBytes(static_cast<double>(size.budget)));
    return {};
  }
  const size_t now = GrowHdf5ChunkCache(source, static_cast<size_t>(target));
  return fmt::format(
      "raised the decoded-chunk cache from {} to {} (the decoded chunks take {}; at most a "
      "quarter of the available RAM)",
      FormatBytes(static_cast<double>(size.budget)), FormatBytes(static_cast<double>(now)),
      FormatBytes(static_cast<double>(size.decoded_bytes)));
#endif
}

}  // namespace

std::optional<std::string> CacheRemedyEvidence(const Diagnosis& d) {
  const bool waits = d.verdict == Verdict::kInputBound || d.verdict == Verdict::kCpuStarved;
  if (!waits || d.consumer_wait_fraction < kMinWait) return std::nullopt;
  if (d.stage != Stage::kRead && d.stage != Stage::kRemote) return std::nullopt;
  // The doctor named the reads from the workers' time; the share of the wait the batch spent
  // being read is the evidence (a remote fetch is a read too).
  const double read = ShareOf(d, "read");
  std::string text = fmt::format("{}: the loop waited {:.0f}% of its time",
                                 d.verdict == Verdict::kInputBound ? "read-bound" : "cpu-starved",
                                 100 * d.consumer_wait_fraction);
  if (!d.wait_path.empty()) text += fmt::format(", {:.0f}% of the wait on reads", 100 * read);
  if (d.stage == Stage::kRemote) text += " from an object store";
  return text;
}

RemedyOptions DefaultRemedies(Loader& loader) {
  RemedyOptions options;
  // A loader with a cache asked for (or opened without remedies) keeps the source it was given.
  const DeferredCachedSource* deferred = DeferredCachedSource::Of(loader.source());
  if (deferred == nullptr) return options;
  options.start_cache = [deferred](std::string* why) { return deferred->Start(why); };
  options.grow_chunk_cache = [deferred](std::string* why) {
    return GrowChunkCache(deferred->base(), why);
  };
  return options;
}

void AttachRemedies(Loader& loader, RemedyOptions options) {
  if (options.check_every_steps < 1) options.check_every_steps = 1;
  auto state = std::make_shared<RemedyState>();
  state->options = std::move(options);
  loader.SetStepObserver([&loader, state] { Check(loader, *state); });
}

}  // namespace gpufeed
