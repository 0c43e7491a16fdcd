// HostProbe: one HostSample per call, from /proc and the cgroup of the watched process.
//
// Cumulative counters (/proc/stat ticks, diskstats sectors, the tree's CPU ticks and
// read_bytes) become rates over the time since the previous call, on the caller's clock, so
// the first call has no rates; each process of the tree gets its own CPU rate the same way. PSS
// walks every page table of the tree, so it is read at most once a second and the last value is
// repeated in between. Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/system/cgroup_reader.h"
#include "core/system/proc_text.h"
#include "gpufeed/monitor_types.h"
#include "monitor/process_tree.h"

namespace gpufeed {

class HostProbe {
 public:
  HostProbe(const std::string& proc_root, const std::string& cgroup_root, pid_t pid);

  // Fills `tree_pids` with the live members of the watched tree (empty once it is gone).
  HostSample Sample(std::chrono::steady_clock::time_point now, std::vector<pid_t>* tree_pids);

 private:
  // The machine-wide figures: CPU, memory, disk reads (rates over `dt` seconds when > 0).
  void SampleMachine(double dt, HostSample& sample);
  // The watched tree's figures; fills `tree_pids`.
  void SampleTree(std::chrono::steady_clock::time_point now, double dt, HostSample& sample,
                  std::vector<pid_t>* tree_pids);

  using TimePoint = std::chrono::steady_clock::time_point;
  std::string proc_root_;
  ProcessTreeReader tree_;
  CgroupReader cgroup_;
  double ticks_per_second_;
  int cpu_count_;

  std::optional<TimePoint> last_time_;
  std::optional<CpuTicks> last_cpu_;
  std::optional<double> last_cpu_ratio_;
  std::optional<uint64_t> last_disk_read_;
  std::optional<uint64_t> last_tree_ticks_;
  std::optional<uint64_t> last_tree_read_;
  double tree_cpu_seconds_ = 0;
  uint64_t tree_read_bytes_ = 0;
  // Each member's own CPU ticks at the previous sample, by pid (with its start time, so a
  // reused pid starts afresh).
  struct MemberTicks {
    uint64_t start_time = 0;
    uint64_t ticks = 0;
  };
  std::unordered_map<pid_t, MemberTicks> last_member_ticks_;
  std::optional<TimePoint> last_pss_time_;
  std::optional<uint64_t> last_pss_;
};

}  // namespace gpufeed
