#include "core/system_memory.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <string>

namespace gpufeed {
namespace {

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return std::stoull(word);
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<uint64_t> MemAvailable(const std::string& root) {
  std::ifstream in(root + "/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::nullopt;
}

// memory.max - memory.current of this process's cgroup v2 ("0::/path" in /proc/self/cgroup).
std::optional<uint64_t> CgroupHeadroom(const std::string& root) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string dir = root + "/sys/fs/cgroup" + line.substr(3);
    if (!dir.empty() && dir.back() == '/') dir.pop_back();
    const auto max = ReadNumber(dir + "/memory.max");
    const auto current = ReadNumber(dir + "/memory.current");
    if (!max || !current) return std::nullopt;
    return *max > *current ? *max - *current : 0;
  }
  return std::nullopt;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  // One decimal where it carries information (below 10 of a unit, and always for GB).
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  const auto scaled = [](double v, const char* unit) {
    return v < 10 ? fmt::format("{:.1f} {}", v, unit) : fmt::format("{:.0f} {}", v, unit);
  };
  if (b >= 1e6) return scaled(b / 1e6, "MB");
  if (b >= 1e3) return scaled(b / 1e3, "KB");
  return fmt::format("{} B", bytes);
}

uint64_t AvailableRamBytes(const std::string& root) {
  uint64_t available = MemAvailable(root).value_or(0);
  if (const auto headroom = CgroupHeadroom(root)) {
    available = available == 0 ? *headroom : std::min(available, *headroom);
  }
  return available;
}

}  // namespace gpufeed
