// The epoch's order as a function of the position, with no table: memory per loader does not
// grow with the data set, and any position of any epoch (a resumed run's next batch) costs the
// same few hashes.
//
// KeyedPermutation is a bijection of [0, n) chosen by a 64-bit key: an alternating Feistel
// network over the smallest bit width that holds n (each round XORs a keyed splitmix64 hash
// of one half into the other, so every round, and the network, is invertible whatever the
// widths), with cycle walking: a value that lands in [n, 2^bits) is sent through the network
// again until it lands in [0, n). The domain is less than 2n, so a value takes fewer than two
// passes on average.
//
// EpochShuffle is one epoch's order of a sampler (before sharding): the identity without
// shuffle, a KeyedPermutation for a full shuffle, and for block shuffle a permutation of the
// blocks followed by a permutation within each window of `window` consecutive blocks of that
// order (whole blocks: the short last block counts as one), computed per position.
//
// Thread-safety: both are immutable values; const methods may be called from any thread.
#pragma once

#include <array>
#include <cstdint>

namespace gpufeed {

class KeyedPermutation {
 public:
  // The identity of the empty range.
  KeyedPermutation() = default;
  // REQUIRES: n >= 0.
  KeyedPermutation(int64_t n, uint64_t key);

  int64_t size() const { return n_; }
  // The image of `i`. REQUIRES: 0 <= i < size().
  int64_t operator()(int64_t i) const;
  // The `i` whose image is `x`. REQUIRES: 0 <= x < size().
  int64_t Inverse(int64_t x) const;

 private:
  static constexpr int kRounds = 8;  // four rounds per half: past Luby-Rackoff's bound

  uint64_t Forward(uint64_t x) const;
  uint64_t Backward(uint64_t x) const;

  int64_t n_ = 0;
  int right_bits_ = 0;
  uint64_t left_mask_ = 0;
  uint64_t right_mask_ = 0;
  std::array<uint64_t, kRounds> keys_ = {};
};

// The last window's permutation of a block shuffle, kept by a caller that asks for many
// positions in a row (consecutive positions share a window). One per thread.
struct ShuffleWindowCache {
  int64_t window = -1;
  int64_t begin = 0;  // the window's first position
  KeyedPermutation within;
};

// One epoch's order over [0, n) of the samples, before sharding.
class EpochShuffle {
 public:
  struct Options {
    bool shuffle = true;
    uint64_t seed = 0;
    int64_t block = 0;  // <= 1: full shuffle; > 1: block shuffle of blocks this long
    int window = 4;     // blocks per within-window shuffle (block shuffle only)
  };

  // REQUIRES: n >= 0, window > 0.
  EpochShuffle(int64_t n, const Options& options, int64_t epoch);

  // The sample at `position` of the epoch's order. REQUIRES: 0 <= position < n.
  int64_t At(int64_t position) const;
  int64_t At(int64_t position, ShuffleWindowCache& cache) const;

 private:
  // The sample at `position` of the blocks laid out in shuffled order.
  int64_t InBlockOrder(int64_t position) const;
  // The block slot `position` lies in, and the first position of slot `slot`, in that layout.
  int64_t SlotOf(int64_t position) const;
  int64_t SlotBegin(int64_t slot) const;

  int64_t n_;
  Options options_;
  uint64_t epoch_key_ = 0;
  KeyedPermutation full_;    // full shuffle
  KeyedPermutation blocks_;  // block shuffle: the order of the blocks
  int64_t tail_ = 0;         // block shuffle: rows of the last, short block (0: none)
  int64_t tail_slot_ = 0;    // block shuffle: where the short block lands in the block order
};

}  // namespace gpufeed
