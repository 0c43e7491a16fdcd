// Parsing small pieces of text: whole-string integers, trimming, splitting. One home for
// them, so that "12abc" is refused and " x " trimmed alike in specs, URIs, environment
// variables, /proc files and headers.
// Thread-safety: pure functions.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

namespace gpufeed {

// The number `text` spells, all of it (an integer in base 10, or a floating-point number):
// nullopt for an empty string, leading white space or '+', trailing characters, a sign the
// type cannot hold, or a value out of the type's range.
template <typename Number>
std::optional<Number> ParseNumber(std::string_view text) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// `s` without leading and trailing white space (std::isspace).
std::string_view Trim(std::string_view s);

// The parts of `s` between the separators, empty ones included ("a,,b" -> a, "", b; "" -> "").
std::vector<std::string_view> Split(std::string_view s, char separator);

}  // namespace gpufeed
