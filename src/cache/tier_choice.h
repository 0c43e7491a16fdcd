// Which cache tier serves a data set, within the RAM and device budgets; and the budgets.
// Thread-safety: pure functions, except the budget readers, which read /proc and cgroupfs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/system_memory.h"  // AvailableRamBytes, FormatBytes

namespace gpufeed {

struct TierInputs {
  std::string requested = "auto";  // auto|none|ram|shm|device
  uint64_t bytes = 0;              // the data set
  uint64_t ram_budget = 0;
  uint64_t device_budget = 0;      // 0 when there is no CUDA device
  bool cuda = false;               // the loader's device is a CUDA device
  bool device_tier_built = false;  // a GPU gather exists (not yet: see cache.h)
  bool shareable = true;           // the source's identity means the same in another process
  uint64_t shm_free = 0;           // free bytes in the shm folder
};

struct TierChoice {
  std::string tier;    // none|ram|shm
  std::string reason;  // "0.8 GB fits the RAM budget 11.2 GB"
};

// Throws Error(kInvalidArgument) for an unknown tier or an explicit ram/shm that exceeds the
// RAM budget (the message says both sizes and how to change them), Error(kUnsupported) for
// an explicit "device" while there is no GPU gather.
TierChoice ChooseTier(const TierInputs& in);



}  // namespace gpufeed
