#include "cache/tier_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "gpufeed/error.h"

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
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.0f} MB", b / 1e6);
  return fmt::format("{:.0f} KB", b / 1e3);
}

uint64_t AvailableRamBytes(const std::string& root) {
  uint64_t available = MemAvailable(root).value_or(0);
  if (const auto headroom = CgroupHeadroom(root)) {
    available = available == 0 ? *headroom : std::min(available, *headroom);
  }
  return available;
}

TierChoice ChooseTier(const TierInputs& in) {
  const std::string size = FormatBytes(in.bytes);
  const bool fits_ram = in.bytes <= in.ram_budget;
  const std::string ram_why =
      fmt::format("{} {} the RAM budget {}", size, fits_ram ? "fits" : "exceeds",
                  FormatBytes(in.ram_budget));
  const std::string raise = "raise ram_budget_bytes or use tier 'auto'";
  if (in.requested == "none") return {"none", "caching is off"};
  if (in.requested == "device") {
    throw Error(ErrorCode::kUnsupported,
                "cache tier 'device' (the data set resident in GPU memory) is not available in "
                "this build: use 'shm' or 'ram', or 'auto'");
  }
  if (in.requested == "ram" || in.requested == "shm") {
    if (!fits_ram) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cache tier '{}': {}; {}", in.requested, ram_why, raise));
    }
    if (in.requested == "shm" && !in.shareable) {
      throw Error(ErrorCode::kInvalidArgument,
                  "cache tier 'shm': this source (arrays in this process's memory) has no "
                  "identity another process could share; use 'ram' or 'none'");
    }
    return {in.requested, ram_why};
  }
  if (in.requested != "auto") {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cache tier '{}' is not one of auto, none, ram, shm, device",
                            in.requested));
  }
  std::string prefix;
  if (in.cuda) {
    const bool fits_device = in.bytes <= in.device_budget;
    prefix = fmt::format("{} {} the device budget {}{}; ", size,
                         fits_device ? "fits" : "exceeds", FormatBytes(in.device_budget),
                         fits_device && !in.device_tier_built ? " but the device tier is not built"
                                                              : "");
  }
  if (!fits_ram) return {"none", prefix + ram_why + ": streaming from the source"};
  if (!in.shareable) {
    return {"none", prefix + "the source is already in this process's memory"};
  }
  if (in.bytes > in.shm_free) {
    return {"ram", prefix + ram_why + fmt::format(" but the shared-memory folder has only {} free",
                                                  FormatBytes(in.shm_free))};
  }
  return {"shm", prefix + ram_why};
}

}  // namespace gpufeed
