// How much memory the machine (and this process's cgroup) has to spare, and how gpufeed
// writes byte counts. One place for both, so the cache budgets, `gpufeed inspect` and the
// doctor agree on what "available RAM" means.
// Thread-safety: pure functions over /proc and /sys.
#pragma once

#include <cstdint>
#include <string>

namespace gpufeed {

// MemAvailable from /proc/meminfo, or memory.max - memory.current of this process's cgroup
// v2 where that is lower; 0 when neither can be read. `root` prefixes the paths (tests).
uint64_t AvailableRamBytes(const std::string& root = "");

// "0.8 GB", "120 MB", "64 KB" (powers of 1000).
std::string FormatBytes(uint64_t bytes);

}  // namespace gpufeed
