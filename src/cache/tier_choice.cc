#include "cache/tier_choice.h"

#include <fmt/format.h>

#include "core/format.h"
#include "gpufeed/error.h"

namespace gpufeed {

namespace {

// "auto" on the host with the data set within the RAM budget, from the measured rates: shm
// where it beats the source and either runs near RAM speed or serves several local
// processes; else RAM where that beats the source; else streaming.
TierChoice ChooseMeasured(const TierInputs& in, const std::string& why) {
  const GatherRates& m = *in.measured;
  const std::string figures = fmt::format("measured: {}", m.ToString());
  const double enough = kCopyMustBeFaster * m.source_bytes_per_s;
  const bool shm_room = in.bytes <= in.shm_free;
  const bool shm_beats_source = shm_room && m.shm_bytes_per_s > enough;
  const bool shm_near_ram = m.shm_bytes_per_s >= kShmNearRam * m.ram_bytes_per_s;
  const double shm_share = m.ram_bytes_per_s > 0 ? m.shm_bytes_per_s / m.ram_bytes_per_s : 0;
  if (shm_beats_source && shm_near_ram) {
    return {CacheTier::kShm,
            fmt::format("{} and a shared copy gathers faster than the source, at {:.0f}% of a "
                        "RAM copy's rate ({}): one copy for every process of the node",
                        why, 100 * shm_share, figures)};
  }
  if (shm_beats_source && in.local_processes > 1) {
    return {CacheTier::kShm,
            fmt::format("{} and a shared copy gathers faster than the source ({}): one copy for "
                        "the node's {} local processes, though a private RAM copy gathers faster",
                        why, figures, in.local_processes)};
  }
  if (m.ram_bytes_per_s > enough) {
    std::string reason =
        fmt::format("{} and a copy gathers faster ({}); RAM, not shm: ", why, figures);
    if (!shm_room) {
      reason += fmt::format("the shared-memory folder has only {} free", FormatBytes(in.shm_free));
    } else if (m.shm_bytes_per_s <= 0) {
      reason += "a shared copy could not be measured here";
    } else if (shm_beats_source) {
      reason += fmt::format(
          "a shared copy gathers at {:.0f}% of RAM's rate here (below {:.0f}%) "
          "and this is the node's only process",
          100 * shm_share, 100 * kShmNearRam);
    } else {
      reason += "a shared copy gathers no faster than the source here";
    }
    return {CacheTier::kRam, reason};
  }
  return {CacheTier::kNone,
          why + ", but a copy would gather no faster (" + figures + "): streaming from the source"};
}

}  // namespace

TierChoice ChooseTier(const TierInputs& in) {
  const std::string size = FormatBytes(in.bytes);
  const bool fits_ram = in.bytes <= in.ram_budget;
  const std::string ram_why = fmt::format(
      "{} {} the RAM budget {}", size, fits_ram ? "fits" : "exceeds", FormatBytes(in.ram_budget));
  const std::string raise = "raise ram_budget_bytes or use tier 'auto'";
  if (in.requested == CacheTier::kNone) return {CacheTier::kNone, "caching is off"};
  // The disk tier is below the source, nothing to choose: OpenCached reports it first.
  GPUFEED_ASSERT(in.requested != CacheTier::kDisk, "the disk tier reached the tier choice");
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
    if (in.requested == CacheTier::kShm && in.shm_published) {
      return {in.requested,
              ram_why + "; its shared-memory cache is already built: mapped as it is"};
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
  if (in.shm_published && in.shareable) {
    // Its memory is spent already (and counted out of the RAM budget's MemAvailable).
    return {CacheTier::kShm,
            prefix + fmt::format("the data set's shared-memory cache ({}) is already built (one "
                                 "copy for every process of the node): used as it is, nothing "
                                 "measured",
                                 size)};
  }
  if (!fits_ram) return {CacheTier::kNone, prefix + ram_why + ": streaming from the source"};
  if (!in.shareable) {
    return {CacheTier::kNone, prefix + "the source is already in this process's memory"};
  }
  if (in.measured) return ChooseMeasured(in, prefix + ram_why);
  if (in.bytes > in.shm_free) {
    return {CacheTier::kRam, prefix + ram_why +
                                 fmt::format(" but the shared-memory folder has only {} free",
                                             FormatBytes(in.shm_free))};
  }
  return {CacheTier::kShm, prefix + ram_why};
}

}  // namespace gpufeed
