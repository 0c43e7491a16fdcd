// When to send a request again: exponential backoff with full jitter, and Retry-After.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpufeed::remote {

inline constexpr double kBackoffBaseS = 0.05;
inline constexpr double kBackoffCapS = 5.0;

// The wait before retry number `retry` (1 for the first retry): full jitter, uniform in
// [0, min(cap, base * 2^(retry-1))]; `unit` is a uniform random number in [0, 1).
double BackoffDelayS(int retry, double unit, double base_s = kBackoffBaseS,
                     double cap_s = kBackoffCapS);

// A Retry-After value in seconds from now: delta-seconds ("120") or an HTTP date, which is
// measured from `now_s` (seconds since the epoch; a date in the past is 0). nullopt for
// anything else, negative numbers included.
std::optional<double> ParseRetryAfter(std::string_view value, int64_t now_s);

}  // namespace gpufeed::remote
