#include "pipeline/loader_state.h"

#include <fmt/format.h>

#include <string>

#include "gpufeed/error.h"
#include "pipeline/loader_checks.h"

namespace gpufeed {

std::shared_ptr<const EpochPlan> EpochOrders::Of(int64_t epoch) {
  MutexLock lock(&mu_);
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  // Keep only the epochs in use: the consumer's and the one the workers run ahead into.
  while (orders_.size() >= 2) orders_.erase(orders_.begin());
  auto order =
      std::make_shared<const EpochPlan>(sampler_.Plan(epoch, epoch == start_epoch_ ? start_ : 0));
  orders_.emplace(epoch, order);
  return order;
}

void EpochOrders::SetStart(int64_t epoch, int64_t start) {
  MutexLock lock(&mu_);
  if (start_epoch_ == (start == 0 ? -1 : epoch) && start_ == start) return;
  // The plans made for the previous start and for the epoch's whole order are stale.
  if (start_epoch_ >= 0) orders_.erase(start_epoch_);
  if (start != 0) orders_.erase(epoch);
  start_epoch_ = start == 0 ? -1 : epoch;
  start_ = start;
}

int64_t EpochOrders::StartOf(int64_t epoch) const {
  MutexLock lock(&mu_);
  return epoch == start_epoch_ ? start_ : 0;
}

int64_t EpochOrders::Batches(int64_t epoch) const {
  return sampler_.BatchesOf(EpochPlan{.epoch = epoch, .start = StartOf(epoch)});
}

LoaderState SaveState(const Sampler& sampler, const LoaderOptions& options, const Source& source,
                      int64_t epoch, int64_t batch, int64_t start) {
  LoaderState state;
  state.epoch = epoch;
  state.batch = batch;
  state.seed = options.seed;
  state.rank = sampler.rank();
  state.world_size = sampler.world_size();
  state.batch_size = options.batch_size;
  state.samples = sampler.num_samples();
  state.schema = source.schema().ToString();
  state.shuffle = ShuffleMode(sampler);
  state.drop_last = sampler.options().drop_last;
  state.pad = sampler.options().pad;
  state.data = DataFingerprint(source);
  const int64_t consumed = sampler.GlobalConsumed(EpochPlan{.epoch = epoch, .start = start}, batch);
  if (consumed >= 0) state.global_consumed = consumed;
  if (start != 0) state.plan_start = start;
  return state;
}

namespace {

// A state without a position in the global order: from an earlier gpufeed, or packed groups
// mid-epoch.
Error NoGlobalPosition(const LoaderState& state, const Sampler& sampler) {
  const std::string saved = state.shuffle.value_or("");
  if (saved.rfind("packed:", 0) == 0) {
    return Error(
        ErrorCode::kInvalidArgument,
        fmt::format("cannot restore loader state: it was saved at batch {} of epoch {} by rank "
                    "{} of {}, and packed groups are dealt to ranks by a packing of every "
                    "rank's groups that depends on the world size, so which groups the other "
                    "ranks had taken is not known at rank {} of {}. Resume at world size {}, or "
                    "from an epoch's start (a state saved at batch 0)",
                    state.batch, state.epoch, state.rank, state.world_size, sampler.rank(),
                    sampler.world_size(), state.world_size));
  }
  const bool world = state.world_size != sampler.world_size();
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("cannot restore loader state: it was saved with {} {}, this loader "
                           "has {} (the state records no position in the epoch's global order, "
                           "which a loader at another rank or world size resumes from: saved "
                           "by an earlier gpufeed?)",
                           world ? "world_size" : "rank", world ? state.world_size : state.rank,
                           world ? sampler.world_size() : sampler.rank()));
}

}  // namespace

ResumePoint ResumeAt(const LoaderState& state, const LoaderOptions& options, const Sampler& sampler,
                     const Source& source) {
  CheckRestorable(state, options, sampler, source);
  const bool same_shard = state.rank == sampler.rank() && state.world_size == sampler.world_size();
  // The same shard: go on from the saved batch of the same plan, exactly as the run would have.
  if (same_shard) {
    const int64_t start = state.plan_start.value_or(0);
    if (start < 0 || start > sampler.num_samples() || (start != 0 && sampler.packer())) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot restore loader state: plan_start {} is no position in "
                              "this loader's epochs of {} samples",
                              start, sampler.num_samples()));
    }
    const int64_t batches = sampler.BatchesOf(EpochPlan{.epoch = state.epoch, .start = start});
    if (state.batch > batches) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot restore loader state: batch {} of epoch {} is outside an "
                              "epoch of {} batches",
                              state.batch, state.epoch, batches));
    }
    return {state.epoch, state.batch, start};
  }
  if (!state.global_consumed) throw NoGlobalPosition(state, sampler);
  const int64_t consumed = *state.global_consumed;
  if (consumed < 0 || consumed > sampler.num_samples()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot restore loader state: global_consumed {} is outside an "
                            "epoch of {} samples",
                            consumed, sampler.num_samples()));
  }
  // At an epoch's boundary every world size stands at the same place, packed groups included.
  if (consumed == sampler.num_samples()) return {state.epoch, sampler.batches_per_epoch(), 0};
  if (consumed == 0) return {state.epoch, 0, 0};
  if (sampler.packer() != nullptr) throw NoGlobalPosition(state, sampler);
  return {state.epoch, 0, consumed};
}

}  // namespace gpufeed
