#include "core/system/system_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "core/log.h"
#include "core/system/cgroup_reader.h"
#include "core/system/proc_text.h"
#include "core/text.h"

namespace gpufeed {

uint64_t AvailableRamBytes(const std::string& root) {
  uint64_t available = 0;
  std::string text;
  if (ReadTextFile(root + "/proc/meminfo", &text)) {
    if (const auto info = ParseMemInfo(text)) available = info->available_bytes;
  }
  const CgroupReading cgroup = CgroupReader::Self(root + "/proc", root + "/sys/fs/cgroup").Read();
  if (cgroup.memory_limit_bytes && cgroup.memory_used_bytes) {
    const uint64_t limit = *cgroup.memory_limit_bytes;
    const uint64_t headroom =
        limit > *cgroup.memory_used_bytes ? limit - *cgroup.memory_used_bytes : 0;
    available = available == 0 ? headroom : std::min(available, headroom);
  }
  return available;
}

std::optional<AddressSpace> AddressSpaceLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  AddressSpace space;
  space.limit = static_cast<uint64_t>(limit.rlim_cur);
  std::string status;
  if (ReadTextFile("/proc/self/status", &status)) {
    space.used = ParseKeyedValue(status, "VmSize").value_or(0);
  }
  return space;
}

uint64_t AllocatableBytes(uint64_t available_ram, const std::optional<AddressSpace>& space) {
  if (!space) return available_ram;
  return available_ram == 0 ? space->left() : std::min(available_ram, space->left());
}

uint64_t AllocatableBytes() { return AllocatableBytes(AvailableRamBytes(), AddressSpaceLimit()); }

uint64_t RamBudgetBytes(uint64_t available) {
  return static_cast<uint64_t>(kRamBudgetShare * static_cast<double>(available));
}

uint64_t RamBudgetBytes() { return RamBudgetBytes(AvailableRamBytes()); }

uint64_t PhysicalRamBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

uint64_t BytesFromEnv(const char* name, uint64_t fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  if (const std::optional<uint64_t> bytes = ParseNumber<uint64_t>(env)) return *bytes;
  Log(LogLevel::kWarning,
      fmt::format("warning: {}='{}' is not a whole number of bytes; using {} (the default)", name,
                  env, fallback));
  return fallback;
}

int OnlineCpus() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

int UsableCpus(const std::string& root) {
  int cpus = OnlineCpus();
  const CgroupReading cgroup = CgroupReader::Self(root + "/proc", root + "/sys/fs/cgroup").Read();
  if (cgroup.cpu_limit_cores) {
    cpus = std::min(cpus, std::max(1, static_cast<int>(std::ceil(*cgroup.cpu_limit_cores - 1e-9))));
  }
  return cpus;
}

}  // namespace gpufeed
