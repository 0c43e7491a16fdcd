#include "pipeline/sampler_permutation.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/splitmix.h"
#include "gpufeed/error.h"
#include "pipeline/random.h"

namespace gpufeed {
namespace {

// Distinct streams of keys from one epoch's key.
constexpr uint64_t kFullShuffleTag = 0x66756c6c5f736866ULL;
constexpr uint64_t kBlockOrderTag = 0x626c6f636b5f6f72ULL;
constexpr uint64_t kWindowTag = 0x77696e646f775f30ULL;

uint64_t SubKey(uint64_t key, uint64_t tag) { return Mix64(key ^ Mix64(tag)); }

uint64_t Round(uint64_t half, uint64_t key) { return SplitMixFinalize(half ^ key); }

}  // namespace

KeyedPermutation::KeyedPermutation(int64_t n, uint64_t key) : n_(n) {
  GPUFEED_ASSERT(n >= 0, "a permutation of a negative count");
  if (n <= 1) return;
  // The smallest width holding n values; n <= 2^63 - 1, so bits <= 63.
  const int bits = std::bit_width(static_cast<uint64_t>(n - 1));
  const int left_bits = bits / 2;
  right_bits_ = bits - left_bits;
  left_mask_ = (uint64_t{1} << left_bits) - 1;
  right_mask_ = (uint64_t{1} << right_bits_) - 1;
  // splitmix64's sequence from `key`: one independent-looking key per round.
  for (int r = 0; r < kRounds; ++r) {
    keys_[static_cast<size_t>(r)] =
        SplitMixFinalize(key + static_cast<uint64_t>(r + 1) * kSplitMixGamma);
  }
}

uint64_t KeyedPermutation::Forward(uint64_t x) const {
  uint64_t left = x >> right_bits_;
  uint64_t right = x & right_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t key = keys_[static_cast<size_t>(r)];
    if (r % 2 == 0) {
      left ^= Round(right, key) & left_mask_;
    } else {
      right ^= Round(left, key) & right_mask_;
    }
  }
  return (left << right_bits_) | right;
}

uint64_t KeyedPermutation::Backward(uint64_t x) const {
  uint64_t left = x >> right_bits_;
  uint64_t right = x & right_mask_;
  for (int r = kRounds - 1; r >= 0; --r) {
    const uint64_t key = keys_[static_cast<size_t>(r)];
    if (r % 2 == 0) {
      left ^= Round(right, key) & left_mask_;
    } else {
      right ^= Round(left, key) & right_mask_;
    }
  }
  return (left << right_bits_) | right;
}

int64_t KeyedPermutation::operator()(int64_t i) const {
  GPUFEED_ASSERT(i >= 0 && i < std::max<int64_t>(n_, 1), "index outside the permutation");
  if (n_ <= 1) return i;
  // Cycle walking: the cycle through i holds i itself, so it comes back into [0, n).
  auto x = static_cast<uint64_t>(i);
  do {
    x = Forward(x);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

int64_t KeyedPermutation::Inverse(int64_t x) const {
  GPUFEED_ASSERT(x >= 0 && x < std::max<int64_t>(n_, 1), "value outside the permutation");
  if (n_ <= 1) return x;
  auto i = static_cast<uint64_t>(x);
  do {
    i = Backward(i);
  } while (i >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(i);
}

EpochShuffle::EpochShuffle(int64_t n, const Options& options, int64_t epoch)
    : n_(n), options_(options) {
  GPUFEED_ASSERT(n >= 0 && options.window > 0, "bad epoch shuffle");
  if (!options_.shuffle) return;
  epoch_key_ = MixSeed(options_.seed, static_cast<uint64_t>(epoch));
  if (options_.block <= 1) {
    full_ = KeyedPermutation(n, SubKey(epoch_key_, kFullShuffleTag));
    return;
  }
  const int64_t block = options_.block;
  const int64_t blocks = n / block + (n % block != 0 ? 1 : 0);
  blocks_ = KeyedPermutation(blocks, SubKey(epoch_key_, kBlockOrderTag));
  tail_ = n % block;
  if (tail_ != 0) tail_slot_ = blocks_.Inverse(blocks - 1);
}

int64_t EpochShuffle::SlotBegin(int64_t slot) const {
  const int64_t block = options_.block;
  // Past the short block, each slot begins block - tail_ earlier than a whole block's would.
  return tail_ != 0 && slot > tail_slot_ ? slot * block - (block - tail_) : slot * block;
}

int64_t EpochShuffle::SlotOf(int64_t position) const {
  const int64_t block = options_.block;
  const int64_t tail_begin = tail_slot_ * block;  // < n: the short block's slot is a real one
  if (tail_ == 0 || position < tail_begin) return position / block;
  if (position < tail_begin + tail_) return tail_slot_;
  return (position - tail_ + block) / block;  // as if the short block had been a whole one
}

int64_t EpochShuffle::InBlockOrder(int64_t position) const {
  const int64_t slot = SlotOf(position);
  return blocks_(slot) * options_.block + (position - SlotBegin(slot));
}

int64_t EpochShuffle::At(int64_t position) const {
  ShuffleWindowCache cache;
  return At(position, cache);
}

int64_t EpochShuffle::At(int64_t position, ShuffleWindowCache& cache) const {
  GPUFEED_ASSERT(position >= 0 && position < n_, "position outside the epoch");
  if (!options_.shuffle) return position;
  if (options_.block <= 1) return full_(position);
  // Window w is the positions of block slots [w * window, (w + 1) * window): whole blocks,
  // the short one among them where it lands, so that a window reads each of its blocks' chunks
  // whole (windows of a fixed number of positions would, past the short block, straddle two
  // blocks at each edge, and their batches read pieces of the edge blocks' chunks).
  const auto window_blocks = static_cast<int64_t>(options_.window);
  const int64_t w = SlotOf(position) / window_blocks;
  if (cache.window != w) {
    const int64_t first = w * window_blocks;
    const int64_t end_slot = first + window_blocks;
    cache.begin = SlotBegin(first);
    const int64_t end = end_slot >= blocks_.size() ? n_ : SlotBegin(end_slot);
    cache.within = KeyedPermutation(end - cache.begin,
                                    SubKey(epoch_key_, kWindowTag + static_cast<uint64_t>(w)));
    cache.window = w;
  }
  return InBlockOrder(cache.begin + cache.within(position - cache.begin));
}

}  // namespace gpufeed
