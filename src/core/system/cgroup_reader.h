// CgroupReader: the CPU quota, CPU throttling and memory limit of a process's cgroup. The one
// reader of cgroup files: the monitor, the RAM budgets and the loader's CPU count use it.
//
// cgroup v2 first: the group named by the `0::` line of /proc/<pid>/cgroup under the v2
// mount (<root>, or <root>/unified on hybrid hosts); cpu.max and memory.max are the
// tightest over the group and its ancestors, cpu.stat and memory.current the group's own.
// A reading v2 lacks (its controller is not enabled there) comes from cgroup v1
// (cpu.cfs_quota_us, cpu.stat throttled_time, memory.limit_in_bytes, memory.usage_in_bytes)
// where that hierarchy is mounted. "Unlimited" is an empty reading, never a huge number.
// Thread-safety: immutable after construction; Read is safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpufeed {

struct CgroupReading {
  std::optional<double> cpu_limit_cores;
  std::optional<double> cpu_throttled_seconds;
  std::optional<uint64_t> cpu_throttled_periods;
  std::optional<uint64_t> memory_limit_bytes;
  std::optional<uint64_t> memory_used_bytes;
};

class CgroupReader {
 public:
  CgroupReader(const std::string& proc_root, const std::string& cgroup_root, pid_t pid);
  // This process's groups, named by <proc_root>/self/cgroup.
  static CgroupReader Self(const std::string& proc_root = "/proc",
                           const std::string& cgroup_root = "/sys/fs/cgroup");
  CgroupReading Read() const;

 private:
  // `proc_cgroup_file`: the /proc/<pid>/cgroup file naming the groups.
  CgroupReader(const std::string& proc_cgroup_file, const std::string& cgroup_root);

  std::vector<std::string> v2_chain_;  // the group's directory first, then its ancestors
  std::string v1_cpu_dir_;
  std::string v1_memory_dir_;
};

}  // namespace gpufeed
