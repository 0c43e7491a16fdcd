// How much memory and how many CPUs the machine (within this process's cgroup) gives
// gpufeed. One place, so the cache budgets, the loader's worker count, `gpufeed inspect` and
// the doctor agree on what "available" means.
// Thread-safety: pure functions over /proc and /sys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gpufeed {

// MemAvailable from /proc/meminfo, or the cgroup's limit minus its usage where that is lower
// (v2, or v1 on hybrid hosts; the tightest limit over the group's ancestors); 0 when neither
// can be read. `root` prefixes the paths (tests).
uint64_t AvailableRamBytes(const std::string& root = "");

// The process's address-space limit (RLIMIT_AS, what `ulimit -v` and many cluster schedulers
// set) and the address space it maps now (VmSize). Every mapping counts against the limit:
// batch buffers, thread stacks, malloc arenas and mapped files alike.
struct AddressSpace {
  uint64_t limit = 0;
  uint64_t used = 0;
  uint64_t left() const { return limit > used ? limit - used : 0; }
};
// Null when the process has no address-space limit (or the system does not say).
std::optional<AddressSpace> AddressSpaceLimit();

// The bytes this process may still allocate: the available RAM (AvailableRamBytes, within the
// cgroup), or what its address-space limit leaves where that is lower; 0 when neither is known.
uint64_t AllocatableBytes();
// The same from readings already taken.
uint64_t AllocatableBytes(uint64_t available_ram, const std::optional<AddressSpace>& space);

// The machine's physical RAM in bytes (all of it, used or not, whatever the cgroup allows);
// 0 when the system does not say.
uint64_t PhysicalRamBytes();

// The byte count environment variable `name` holds, when it holds a whole number; else
// `fallback`. A value that is not one (a typo, "4GB") is named in a warning and the fallback
// is used: a memory budget set wrong must not pass unnoticed.
uint64_t BytesFromEnv(const char* name, uint64_t fallback);

// Online CPUs (hardware threads), at least 1; no cgroup quota applied.
int OnlineCpus();
// Online CPUs, or the cgroup's CPU quota rounded up where it is lower; at least 1.
int UsableCpus(const std::string& root = "");

// The share of available RAM a cache of the whole data set may take: half, leaving the other
// half to the training process, the page cache and the other ranks on the node.
inline constexpr double kRamBudgetShare = 0.5;
// kRamBudgetShare of `available` (default: AvailableRamBytes(root)).
uint64_t RamBudgetBytes(uint64_t available);
uint64_t RamBudgetBytes();

}  // namespace gpufeed
