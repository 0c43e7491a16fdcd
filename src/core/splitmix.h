// splitmix64 (Steele, Lea and Flood, 2014): the mixer every seeded derivation in gpufeed
// goes through (the sampler's and the transforms' seeds, synthetic data, the demo's labels),
// so that one function, bit-for-bit the same on every machine, defines them all.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace gpufeed {

// The golden-ratio increment of splitmix64's state.
inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ULL;

// splitmix64's output function: a bijective 64-bit mix.
constexpr uint64_t SplitMixFinalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One splitmix64 step from state x: a good 64-bit mix for deriving seeds.
constexpr uint64_t Mix64(uint64_t x) { return SplitMixFinalize(x + kSplitMixGamma); }

}  // namespace gpufeed
