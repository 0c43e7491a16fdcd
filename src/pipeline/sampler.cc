#include "gpufeed/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <numeric>
#include <string_view>

#include "core/text.h"
#include "gpufeed/error.h"
#include "pipeline/group_packer.h"
#include "pipeline/random.h"

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
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("rank {} is outside [0, world_size={})", options_.rank,
                            options_.world_size));
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
  // Positions dealt: cut down (drop_last) or padded up (pad) to a multiple of world_size.
  int64_t used = num_samples;
  if (options_.drop_last) {
    used = num_samples / world * world;
  } else if (options_.pad && num_samples > 0) {
    used = (num_samples + world - 1) / world * world;
  }
  // Round-robin dealing: rank r gets positions r, r + world, ...
  shard_size_ = used / world + (options_.rank < used % world ? 1 : 0);
  const int64_t b = options_.batch_size;
  batches_per_epoch_ = options_.drop_last ? shard_size_ / b : (shard_size_ + b - 1) / b;
  if (options_.drop_last) shard_size_ = batches_per_epoch_ * b;
}

std::vector<int64_t> Sampler::EpochOrder(int64_t epoch) const {
  if (packer_) return packer_->Plan(epoch).order;
  std::vector<int64_t> all(static_cast<size_t>(num_samples_));
  std::iota(all.begin(), all.end(), int64_t{0});
  if (options_.shuffle) {
    Pcg32 rng(MixSeed(options_.seed, static_cast<uint64_t>(epoch)));
    const int64_t block = options_.shuffle_block;
    if (block <= 1) {
      Shuffle(all.data(), num_samples_, rng);
    } else {
      const int64_t blocks = (num_samples_ + block - 1) / block;
      std::vector<int64_t> block_order(static_cast<size_t>(blocks));
      std::iota(block_order.begin(), block_order.end(), int64_t{0});
      Shuffle(block_order.data(), blocks, rng);
      size_t pos = 0;
      for (int64_t blk : block_order) {
        const int64_t begin = blk * block;
        const int64_t end = std::min(num_samples_, begin + block);
        for (int64_t s = begin; s < end; ++s) all[pos++] = s;
      }
      // Mix samples within windows of shuffle_window blocks' worth of positions.
      const int64_t window = block * options_.shuffle_window;
      for (int64_t start = 0; start < num_samples_; start += window) {
        Shuffle(all.data() + start, std::min(window, num_samples_ - start), rng);
      }
    }
  }
  const int64_t world = options_.world_size;
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(shard_size_));
  for (int64_t pos = options_.rank; static_cast<int64_t>(shard.size()) < shard_size_;
       pos += world) {
    // Positions past the end are the padding: the epoch's order again from its start.
    shard.push_back(all[static_cast<size_t>(pos % num_samples_)]);
  }
  return shard;
}

std::span<const int64_t> Sampler::BatchOf(const std::vector<int64_t>& order,
                                          int64_t batch) const {
  GPUFEED_ASSERT(batch >= 0 && batch < batches_per_epoch_, "batch outside the epoch");
  GPUFEED_ASSERT(!packer_, "packed batches vary in size: use BatchOf(EpochPlan)");
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size,
                                        static_cast<int64_t>(order.size()));
  return std::span<const int64_t>(order.data() + begin, static_cast<size_t>(end - begin));
}

EpochPlan Sampler::Plan(int64_t epoch) const {
  if (packer_) return packer_->Plan(epoch);
  return EpochPlan{EpochOrder(epoch)};
}

std::span<const int64_t> Sampler::BatchOf(const EpochPlan& plan, int64_t batch) const {
  if (plan.batch_starts.empty()) return BatchOf(plan.order, batch);
  GPUFEED_ASSERT(batch >= 0 && batch < batches_per_epoch_, "batch outside the epoch");
  const auto b = static_cast<size_t>(batch);
  return std::span<const int64_t>(
      plan.order.data() + plan.batch_starts[b],
      static_cast<size_t>(plan.batch_starts[b + 1] - plan.batch_starts[b]));
}

std::span<const BatchGroup> Sampler::GroupsOf(const EpochPlan& plan, int64_t batch) const {
  if (plan.group_starts.empty()) return {};
  const auto b = static_cast<size_t>(batch);
  return std::span<const BatchGroup>(
      plan.groups.data() + plan.group_starts[b],
      static_cast<size_t>(plan.group_starts[b + 1] - plan.group_starts[b]));
}

}  // namespace gpufeed
