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
  const uint64_t device_bytes = in.device_bytes != 0 ? in.device_bytes : in.bytes;
  const bool fits_device = device_bytes <= in.device_budget;
  const std::string device_why =
      fmt::format("{} {} the device budget {}", FormatBytes(device_bytes),
                  fits_device ? "fits" : "exceeds", FormatBytes(in.device_budget));
  if (in.requested == "device") {
    if (!in.cuda) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cache tier 'device' keeps the data set in GPU memory, but the "
                              "loader's device is {}: use device 'cuda', or tier 'shm' or 'ram'",
                              in.device_name.empty() ? "not a CUDA device" : in.device_name));
    }
    if (!in.device_refusal.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cache tier 'device': {}", in.device_refusal));
    }
    if (!fits_device) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cache tier 'device': {} ({} bytes > {} bytes) on {}; raise "
                              "device_budget_bytes or use tier 'auto'",
                              device_why, device_bytes, in.device_budget, in.device_name));
    }
    return {"device", device_why};
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
    if (!in.device_refusal.empty()) {
      prefix = fmt::format("not the device tier: {}; ", in.device_refusal);
    } else if (fits_device) {
      return {"device", device_why};
    } else {
      prefix = device_why + "; ";
    }
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
