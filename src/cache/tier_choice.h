// Which cache tier serves a data set, within the RAM and device budgets; and the budgets.
// Thread-safety: pure functions, except the budget readers, which read /proc and cgroupfs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cache/gather_probe.h"
#include "gpufeed/source.h"  // CacheTier

namespace gpufeed {

struct TierInputs {
  CacheTier requested = CacheTier::kAuto;
  uint64_t bytes = 0;  // the data set
  // What the device tier would hold (after the transforms it applies before the upload);
  // 0 = `bytes`.
  uint64_t device_bytes = 0;
  uint64_t ram_budget = 0;
  uint64_t device_budget = 0;  // 0 when there is no CUDA device
  bool cuda = false;           // the loader's device is a CUDA device
  std::string device_name;     // "cuda:0": for messages
  // Why the device tier cannot serve this loader even if the data fits ("the transform
  // specaugment(mel) is random: ..."); empty when it can.
  std::string device_refusal;
  bool shareable = true;  // the source's identity means the same in another process
  uint64_t shm_free = 0;  // free bytes in the shm folder
  // "auto" on the host: how fast rows are gathered from the source and from each copy, when
  // measured (ProbeGatherRates). Then a copy is made only when it gathers faster.
  std::optional<GatherRates> measured;
  // The source's shared-memory cache is already published and passed its checks at open:
  // under "auto" it serves whatever a probe or the RAM budget would say (it costs no build,
  // and no memory beyond the copy that exists), so nothing is measured.
  bool shm_published = false;
  // Processes of this training run on this node ($LOCAL_WORLD_SIZE; 1 when unset). Where
  // several share the data set, one shm copy serves them all even when it gathers slower
  // than a private RAM copy would.
  int local_processes = 1;
};

// A copy must gather this much faster than the source to be worth making (its build time,
// and the RAM or /dev/shm it holds).
inline constexpr double kCopyMustBeFaster = 1.1;
// A single process takes shm (one copy for every later process and trial of the node) over
// a private RAM copy when shm gathers at least this fraction of RAM's rate.
inline constexpr double kShmNearRam = 0.8;

struct TierChoice {
  CacheTier tier = CacheTier::kNone;  // never kAuto
  std::string reason;                 // "0.8 GB fits the RAM budget 11.2 GB"
};

// Throws Error(kInvalidArgument) for an explicit ram/shm that exceeds the
// RAM budget or an explicit device that exceeds the device budget (the message says both
// sizes and how to change them), and an explicit device the loader cannot use (not CUDA, or
// the refusal's reason).
TierChoice ChooseTier(const TierInputs& in);

}  // namespace gpufeed
