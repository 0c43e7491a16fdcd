// Checked arithmetic for sizes, counts, offsets and shapes that come from untrusted input.
//
// Every shape product and byte count derived from a file, a cache header, a schema string or
// a database stream goes through these: a product or sum that does not fit in 64 bits is
// reported instead of wrapping. The `...OrThrow` forms throw gpufeed::Error (kCorruptData by
// default) with the caller's description of what overflowed, so the message names the file
// and field.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "gpufeed/error.h"

namespace gpufeed {

// a * b, or nullopt when it does not fit in uint64_t.
[[nodiscard]] inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when it does not fit in uint64_t.
[[nodiscard]] inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of all values (1 for none), or nullopt when any partial product overflows.
// A zero anywhere still checks the other factors' partial products in order, so a shape like
// (2^62, 2^62, 0) is rejected rather than accepted as 0 elements.
[[nodiscard]] inline std::optional<uint64_t> CheckedProduct(std::span<const uint64_t> values) {
  uint64_t out = 1;
  for (uint64_t v : values) {
    if (__builtin_mul_overflow(out, v, &out)) return std::nullopt;
  }
  return out;
}

// a * b, or throws Error(code, what + " overflows 64 bits (a x b)").
inline uint64_t MulOrThrow(uint64_t a, uint64_t b, const std::string& what,
                           ErrorCode code = ErrorCode::kCorruptData) {
  if (auto r = CheckedMul(a, b)) return *r;
  throw Error(code, what + " overflows 64 bits (" + std::to_string(a) + " x " +
                        std::to_string(b) + ")");
}

// a + b, or throws Error(code, what + " overflows 64 bits (a + b)").
inline uint64_t AddOrThrow(uint64_t a, uint64_t b, const std::string& what,
                           ErrorCode code = ErrorCode::kCorruptData) {
  if (auto r = CheckedAdd(a, b)) return *r;
  throw Error(code, what + " overflows 64 bits (" + std::to_string(a) + " + " +
                        std::to_string(b) + ")");
}

}  // namespace gpufeed
