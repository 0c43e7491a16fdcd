// Backoff and Retry-After.
#include "remote/retry.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/text.h"

namespace gpufeed::remote {

double BackoffDelayS(int retry, double unit, double base_s, double cap_s) {
  const int doublings = std::clamp(retry - 1, 0, 60);
  const double ceiling = std::min(cap_s, base_s * std::ldexp(1.0, doublings));
  return std::clamp(unit, 0.0, 1.0) * ceiling;
}

std::optional<double> ParseRetryAfter(std::string_view value, int64_t now_s) {
  value = Trim(value);
  if (value.empty()) return std::nullopt;
  if (value.front() >= '0' && value.front() <= '9') {
    std::optional<int64_t> seconds = ParseNumber<int64_t>(value);
    if (!seconds) return std::nullopt;
    return static_cast<double>(*seconds);
  }
  // curl_getdate reads RFC 1123, RFC 850 and asctime dates, as HTTP allows.
  const std::string text(value);
  const time_t when = curl_getdate(text.c_str(), nullptr);
  if (when < 0) return std::nullopt;
  return std::max<double>(0, static_cast<double>(static_cast<int64_t>(when) - now_s));
}

}  // namespace gpufeed::remote
