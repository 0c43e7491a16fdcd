#include "cache/tier_choice.h"

#include "core/system_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "gpufeed/error.h"

namespace gpufeed {

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
