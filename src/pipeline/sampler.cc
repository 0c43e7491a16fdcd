#include "pipeline/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <new>
#include <string_view>

#include "core/format.h"
#include "core/text.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"
#include "pipeline/groups/group_packer.h"
#include "pipeline/sampler_permutation.h"

namespace gpufeed {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  const std::optional<int> out = ParseNumber<int>(value);
  if (!out) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("environment variable {}='{}' is not an integer", name, value));
  }
  return *out;
}

}  // namespace

Sampler::Sampler(int64_t num_samples, SamplerOptions options)
    : options_(options), num_samples_(num_samples) {
  if (options_.batch_size <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("batch_size must be positive, got {}", options_.batch_size));
  }
  if (num_samples < 0) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("negative sample count {}", num_samples));
  }
  if (options_.world_size < 0) options_.world_size = EnvInt("WORLD_SIZE", 1);
  if (options_.rank < 0) options_.rank = EnvInt("RANK", 0);
  if (options_.world_size <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("world_size must be positive, got {}", options_.world_size));
  }
  if (options_.rank < 0 || options_.rank >= options_.world_size) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("rank {} is outside [0, world_size={})",
                                                         options_.rank, options_.world_size));
  }
  if (options_.shuffle_block < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("shuffle_block must be >= 0, got {}", options_.shuffle_block));
  }
  if (options_.shuffle_window <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("shuffle_window must be positive, got {}", options_.shuffle_window));
  }
  if (options_.groups) {
    if (options_.groups->num_rows() != num_samples) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("groups {} cover {} rows, the data set has {}",
                              options_.groups->name(), options_.groups->num_rows(), num_samples));
    }
    if (options_.drop_last) {
      throw Error(ErrorCode::kInvalidArgument,
                  "drop_last does not apply to packed groups: every row is delivered once");
    }
    GroupPackOptions pack;
    pack.batch_size = options_.batch_size;
    pack.shuffle = options_.shuffle;
    pack.seed = options_.seed;
    pack.rank = options_.rank;
    pack.world_size = options_.world_size;
    pack.pad = options_.pad;
    pack.window = options_.pack_window;
    packer_ = std::make_shared<const GroupPacker>(options_.groups, pack);
    shard_size_ = packer_->rows();
    batches_per_epoch_ = packer_->batches();
    return;
  }
  const int64_t world = options_.world_size;
  if (num_samples > std::numeric_limits<int64_t>::max() - world) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} samples over {} ranks is past what a 64-bit position can count",
                            num_samples, world));
  }
  const Deal deal = DealOf(num_samples);
  shard_size_ = deal.shard;
  batches_per_epoch_ = deal.batches;
}

Sampler::Deal Sampler::DealOf(int64_t remaining) const {
  const int64_t world = options_.world_size;
  // Positions dealt: cut down (drop_last) or padded up (pad) to a multiple of world_size.
  int64_t used = remaining;
  if (options_.drop_last) {
    used = remaining / world * world;
  } else if (options_.pad && remaining > 0) {
    used = (remaining + world - 1) / world * world;
  }
  // Round-robin dealing: rank r gets positions r, r + world, ...
  Deal deal;
  deal.shard = used / world + (options_.rank < used % world ? 1 : 0);
  const int64_t b = options_.batch_size;
  deal.batches = options_.drop_last ? deal.shard / b : deal.shard / b + (deal.shard % b != 0);
  if (options_.drop_last) deal.shard = deal.batches * b;
  return deal;
}

EpochShuffle Sampler::ShuffleOf(int64_t epoch) const {
  return EpochShuffle(num_samples_,
                      EpochShuffle::Options{.shuffle = options_.shuffle,
                                            .seed = options_.seed,
                                            .block = options_.shuffle_block,
                                            .window = options_.shuffle_window},
                      epoch);
}

// Rank r's i-th sample is position start + r + i * world of the epoch's order; positions past
// its end are the padding: the dealt positions again from `start` on.
int64_t Sampler::SampleAt(const EpochShuffle& shuffle, int64_t start, int64_t i,
                          ShuffleWindowCache& cache) const {
  const int64_t offset = options_.rank + i * options_.world_size;
  const int64_t remaining = num_samples_ - start;
  return shuffle.At(start + (offset < remaining ? offset : offset % remaining), cache);
}

int64_t Sampler::SampleAt(int64_t epoch, int64_t i) const {
  GPUFEED_ASSERT(!packer_, "packed groups are planned per epoch: use Plan");
  GPUFEED_ASSERT(i >= 0 && i < shard_size_, "position outside the shard");
  ShuffleWindowCache cache;
  return SampleAt(ShuffleOf(epoch), 0, i, cache);
}

std::vector<int64_t> Sampler::EpochOrder(int64_t epoch) const {
  const uint64_t ram = HostDevice()->MemoryInfo().total_bytes;
  const uint64_t bytes = static_cast<uint64_t>(shard_size_) * sizeof(int64_t);
  if (ram > 0 && bytes > ram) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("the whole order of an epoch of {} samples takes {}, more than this "
                            "machine's {} of RAM: take it batch by batch (Plan and BatchOf)",
                            shard_size_, FormatBytes(static_cast<double>(bytes)),
                            FormatBytes(static_cast<double>(ram))));
  }
  if (packer_) return packer_->Plan(epoch).order;
  const EpochShuffle shuffle = ShuffleOf(epoch);
  std::vector<int64_t> order;
  try {
    order.resize(static_cast<size_t>(shard_size_));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("out of memory allocating the whole order of an epoch ({} samples, "
                            "{}): take it batch by batch (Plan and BatchOf)",
                            shard_size_, FormatBytes(static_cast<double>(bytes))));
  }
  ShuffleWindowCache cache;
  for (int64_t i = 0; i < shard_size_; ++i) {
    order[static_cast<size_t>(i)] = SampleAt(shuffle, 0, i, cache);
  }
  return order;
}

EpochPlan Sampler::Plan(int64_t epoch, int64_t start) const {
  if (start < 0 || start > num_samples_) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("an epoch's plan starts at a position in [0, {}] of its order, not {}",
                            num_samples_, start));
  }
  if (packer_) {
    if (start != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "packed groups are planned for whole epochs: they have no position in a "
                  "global order to start from");
    }
    EpochPlan plan = packer_->Plan(epoch);
    plan.epoch = epoch;
    return plan;
  }
  return EpochPlan{.epoch = epoch, .start = start};
}

int64_t Sampler::BatchesOf(const EpochPlan& plan) const {
  return plan.start == 0 ? batches_per_epoch_ : DealOf(num_samples_ - plan.start).batches;
}

int64_t Sampler::ShardOf(const EpochPlan& plan) const {
  return plan.start == 0 ? shard_size_ : DealOf(num_samples_ - plan.start).shard;
}

// With every rank k batches into the plan, rank r has taken its positions start + r + i * world
// for i < k * batch_size: together, the positions below start + k * batch_size * world that were
// dealt at all (beyond num_samples() they are padding).
int64_t Sampler::GlobalConsumed(const EpochPlan& plan, int64_t batches) const {
  const bool done = batches >= BatchesOf(plan);
  if (packer_) {
    if (batches == 0) return 0;
    return done ? num_samples_ : -1;
  }
  if (done && options_.drop_last) return num_samples_;
  // batches * batch_size * world >= remaining exactly when batches * batch_size >= per_rank;
  // below that the product is less than `remaining`, so it cannot overflow.
  const int64_t world = options_.world_size;
  const int64_t remaining = num_samples_ - plan.start;
  const int64_t per_rank = remaining / world + (remaining % world != 0);
  const int64_t b = options_.batch_size;
  if (batches >= per_rank / b + (per_rank % b != 0)) return num_samples_;
  return plan.start + batches * b * world;
}

int64_t Sampler::BatchRows(const EpochPlan& plan, int64_t batch) const {
  GPUFEED_ASSERT(batch >= 0 && batch < BatchesOf(plan), "batch outside the epoch");
  if (!plan.batch_starts.empty()) {
    const auto b = static_cast<size_t>(batch);
    return plan.batch_starts[b + 1] - plan.batch_starts[b];
  }
  GPUFEED_ASSERT(!packer_, "a packed batch needs its packed plan");
  const int64_t begin = batch * options_.batch_size;
  return std::min(options_.batch_size, ShardOf(plan) - begin);
}

std::vector<int64_t> Sampler::BatchOf(const EpochPlan& plan, int64_t batch) const {
  const int64_t rows = BatchRows(plan, batch);
  std::vector<int64_t> out;
  try {
    out.resize(static_cast<size_t>(rows));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("out of memory allocating the sample indices of batch {} ({} samples, "
                            "{}): lower batch_size",
                            batch, rows, FormatBytes(static_cast<double>(rows) * 8)));
  }
  if (!plan.batch_starts.empty()) {
    const int64_t* begin = plan.order.data() + plan.batch_starts[static_cast<size_t>(batch)];
    std::copy(begin, begin + rows, out.begin());
    return out;
  }
  const EpochShuffle shuffle = ShuffleOf(plan.epoch);
  const int64_t first = batch * options_.batch_size;
  ShuffleWindowCache cache;
  for (int64_t k = 0; k < rows; ++k) {
    out[static_cast<size_t>(k)] = SampleAt(shuffle, plan.start, first + k, cache);
  }
  return out;
}

std::span<const BatchGroup> Sampler::GroupsOf(const EpochPlan& plan, int64_t batch) const {
  if (plan.group_starts.empty()) return {};
  const auto b = static_cast<size_t>(batch);
  return std::span<const BatchGroup>(
      plan.groups.data() + plan.group_starts[b],
      static_cast<size_t>(plan.group_starts[b + 1] - plan.group_starts[b]));
}

}  // namespace gpufeed
