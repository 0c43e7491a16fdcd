#include "core/format.h"

#include <fmt/format.h>

namespace gpufeed {

std::string FormatBytes(double bytes) {
  if (!(bytes > 0)) return "0 B";  // negative, zero and NaN
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  const auto scaled = [](double v, const char* unit) {
    return v < 10 ? fmt::format("{:.1f} {}", v, unit) : fmt::format("{:.0f} {}", v, unit);
  };
  if (bytes >= 1e6) return scaled(bytes / 1e6, "MB");
  if (bytes >= 1e3) return scaled(bytes / 1e3, "KB");
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace gpufeed
