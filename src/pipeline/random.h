// Portable seeded randomness: the same seed gives the same numbers on every machine and
// standard library (std::uniform_int_distribution and std::shuffle are implementation-
// defined, so they are not used for anything a seed must reproduce).
// Thread-safety: Pcg32 is a value; one thread at a time per instance.
#pragma once

#include <cstdint>
#include <utility>

#include "core/splitmix.h"  // Mix64

namespace gpufeed {

inline uint64_t MixSeed(uint64_t seed, uint64_t stream) { return Mix64(Mix64(seed) ^ stream); }

// PCG-XSH-RR 32-bit output, 64-bit state (O'Neill).
class Pcg32 {
 public:
  explicit Pcg32(uint64_t seed) : state_(0) {
    Next();
    state_ += seed;
    Next();
  }
  uint32_t Next() {
    const uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    const auto rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
  }
  uint64_t Next64() { return (static_cast<uint64_t>(Next()) << 32) | Next(); }
  // Uniform in [0, bound) without modulo bias (Lemire's method). REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound) {
    if (bound <= 0xffffffffULL) {
      const auto b32 = static_cast<uint32_t>(bound);
      uint64_t m = static_cast<uint64_t>(Next()) * b32;
      auto low = static_cast<uint32_t>(m);
      if (low < b32) {
        const uint32_t threshold = (0u - b32) % b32;
        while (low < threshold) {
          m = static_cast<uint64_t>(Next()) * b32;
          low = static_cast<uint32_t>(m);
        }
      }
      return m >> 32;
    }
    // Rejection sampling for bounds past 32 bits.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = Next64();
    } while (x >= limit);
    return x % bound;
  }
  // Uniform float in [0, 1).
  float Uniform() { return static_cast<float>(Next() >> 8) * (1.0f / 16777216.0f); }

 private:
  uint64_t state_;
};

// Fisher-Yates shuffle of n items.
template <typename T>
void Shuffle(T* items, int64_t n, Pcg32& rng) {
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(items[i], items[j]);
  }
}

}  // namespace gpufeed
