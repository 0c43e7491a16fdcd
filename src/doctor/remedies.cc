// The doctor's safe advice, taken by the loader: see gpufeed/remedies.h.
#include "gpufeed/remedies.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <utility>

#include "core/log.h"

namespace gpufeed {
namespace {

// Below this share of its time waiting, the loop is not worth a copy of the data set.
constexpr double kMinWait = 0.10;
// The reads must hold at least this share of the wait.
constexpr double kMinReadShare = 0.5;

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
  bool cache_tried = false;
};

void Check(Loader& loader, RemedyState& state) {
  if (state.cache_tried || !state.options.start_cache) return;
  // A look every few steps, or every few seconds when steps are slow (a starved loader).
  const auto now = std::chrono::steady_clock::now();
  if (++state.steps < state.options.check_every_steps &&
      now - state.last_look < std::chrono::duration<double>(state.options.check_every_s)) {
    return;
  }
  state.steps = 0;
  state.last_look = now;
  const Diagnosis diagnosis = Diagnose(CollectDoctorInput(loader, nullptr));
  const std::optional<std::string> evidence = CacheRemedyEvidence(diagnosis);
  if (!evidence) return;
  state.cache_tried = true;
  const int64_t batch = loader.stats().batches;
  std::string why;
  const std::string started = state.options.start_cache(&why);
  if (started.empty()) {
    Log(LogLevel::kInfo,
        fmt::format("batch {}: {}; not copying the data set: {}", batch, *evidence, why));
    return;
  }
  std::string action =
      fmt::format("batch {}: {}; building {} in the background", batch, *evidence, started);
  Log(LogLevel::kInfo, action);
  loader.RecordAction(std::move(action));
}

}  // namespace

std::optional<std::string> CacheRemedyEvidence(const Diagnosis& d) {
  const bool waits = d.verdict == Verdict::kInputBound || d.verdict == Verdict::kCpuStarved;
  if (!waits || d.consumer_wait_fraction < kMinWait) return std::nullopt;
  if (d.stage != Stage::kRead && d.stage != Stage::kRemote) return std::nullopt;
  // The read stage's share of the wait (a remote fetch is a read too).
  const double read = ShareOf(d, "read");
  if (!d.wait_path.empty() && read < kMinReadShare) return std::nullopt;
  std::string text = fmt::format("{}: the loop waited {:.0f}% of its time",
                                 d.verdict == Verdict::kInputBound ? "read-bound" : "cpu-starved",
                                 100 * d.consumer_wait_fraction);
  if (!d.wait_path.empty()) text += fmt::format(", {:.0f}% of the wait on reads", 100 * read);
  if (d.stage == Stage::kRemote) text += " from an object store";
  return text;
}

void AttachRemedies(Loader& loader, RemedyOptions options) {
  if (options.check_every_steps < 1) options.check_every_steps = 1;
  auto state = std::make_shared<RemedyState>();
  state->options = std::move(options);
  loader.SetStepObserver([&loader, state] { Check(loader, *state); });
}

}  // namespace gpufeed
