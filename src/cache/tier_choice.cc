#include "cache/tier_choice.h"

#include <fmt/format.h>

#include "core/format.h"
#include "gpufeed/error.h"

namespace gpufeed {

TierChoice ChooseTier(const TierInputs& in) {
  const std::string size = FormatBytes(in.bytes);
  const bool fits_ram = in.bytes <= in.ram_budget;
  const std::string ram_why = fmt::format(
      "{} {} the RAM budget {}", size, fits_ram ? "fits" : "exceeds", FormatBytes(in.ram_budget));
  const std::string raise = "raise ram_budget_bytes or use tier 'auto'";
  if (in.requested == CacheTier::kNone) return {CacheTier::kNone, "caching is off"};
  const uint64_t device_bytes = in.device_bytes != 0 ? in.device_bytes : in.bytes;
  const bool fits_device = device_bytes <= in.device_budget;
  const std::string device_why =
      fmt::format("{} {} the device budget {}", FormatBytes(device_bytes),
                  fits_device ? "fits" : "exceeds", FormatBytes(in.device_budget));
  if (in.requested == CacheTier::kDevice) {
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
    return {CacheTier::kDevice, device_why};
  }
  if (in.requested == CacheTier::kRam || in.requested == CacheTier::kShm) {
    if (!fits_ram) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("cache tier '{}': {}; {}", CacheTierName(in.requested), ram_why, raise));
    }
    if (in.requested == CacheTier::kShm && !in.shareable) {
      throw Error(ErrorCode::kInvalidArgument,
                  "cache tier 'shm': this source (arrays in this process's memory) has no "
                  "identity another process could share; use 'ram' or 'none'");
    }
    return {in.requested, ram_why};
  }
  std::string prefix;
  if (in.cuda) {
    if (!in.device_refusal.empty()) {
      prefix = fmt::format("not the device tier: {}; ", in.device_refusal);
    } else if (fits_device) {
      return {CacheTier::kDevice, device_why};
    } else {
      prefix = device_why + "; ";
    }
  }
  if (!fits_ram) return {CacheTier::kNone, prefix + ram_why + ": streaming from the source"};
  if (!in.shareable) {
    return {CacheTier::kNone, prefix + "the source is already in this process's memory"};
  }
  if (in.measured) {
    // shm where it can serve (one copy for every process of the node), else RAM; either only
    // when it gathers faster than the source. shm verifies each block it serves, so a RAM copy
    // can beat the source where shm does not.
    const GatherRates& m = *in.measured;
    const std::string figures = fmt::format("measured: {}", m.ToString());
    const double enough = kCopyMustBeFaster * m.source_bytes_per_s;
    const bool shm_fits = in.bytes <= in.shm_free && m.shm_bytes_per_s > 0;
    if (shm_fits && m.shm_bytes_per_s > enough) {
      return {CacheTier::kShm, prefix + ram_why + " and a copy gathers faster (" + figures + ")"};
    }
    if (m.ram_bytes_per_s > enough) {
      std::string why = prefix + ram_why + " and a copy gathers faster (" + figures + ")";
      why += shm_fits ? "; RAM, not shm: shm's verified reads gather no faster than the source"
                      : fmt::format("; the shared-memory folder has only {} free",
                                    FormatBytes(in.shm_free));
      return {CacheTier::kRam, why};
    }
    return {CacheTier::kNone, prefix + ram_why + ", but a copy would gather no faster (" + figures +
                                  "): streaming from the source"};
  }
  if (in.bytes > in.shm_free) {
    return {CacheTier::kRam, prefix + ram_why +
                                 fmt::format(" but the shared-memory folder has only {} free",
                                             FormatBytes(in.shm_free))};
  }
  return {CacheTier::kShm, prefix + ram_why};
}

}  // namespace gpufeed
