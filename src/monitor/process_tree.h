// ProcessTreeReader: finds a process and all its descendants in /proc and adds up their CPU
// time, RSS, PSS and disk reads.
//
// Children are found through /proc/<pid>/task/<tid>/children where the kernel has it
// (CONFIG_PROC_CHILDREN), else by scanning every /proc/<n>/stat for its ppid. CPU time of a
// member counts utime+stime+cutime+cstime, so children that exited and were reaped by a
// member stay counted (in their parent's cutime) and none counts twice; only a descendant
// that is re-parented out of the tree (to init) takes its time with it.
// Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/system/proc_text.h"

namespace gpufeed {

// One live member of the tree.
struct ProcessTreeMember {
  pid_t pid = 0;
  pid_t ppid = 0;
  std::string name;         // comm
  uint64_t start_time = 0;  // ticks after boot: tells a reused pid apart
  uint64_t own_ticks = 0;   // its own utime + stime (children not counted)
  uint64_t rss_bytes = 0;
};

struct ProcessTreeReading {
  std::vector<pid_t> pids;                 // live members, the root first
  std::vector<ProcessTreeMember> members;  // the same processes, in the same order
  uint64_t cpu_ticks = 0;                  // cumulative, USER_HZ ticks
  uint64_t rss_bytes = 0;
  std::optional<uint64_t> pss_bytes;   // when asked for and readable
  std::optional<uint64_t> read_bytes;  // io read_bytes of the members that allow reading it
};

class ProcessTreeReader {
 public:
  ProcessTreeReader(std::string proc_root, pid_t root);

  // Nullopt once the root is gone (exited, a zombie, or its pid reused by another process).
  std::optional<ProcessTreeReading> Read(bool with_pss);

 private:
  std::vector<pid_t> ChildrenFromTaskFiles(pid_t pid, bool* supported);
  ProcessTreeReading SumMembers(const std::vector<pid_t>& order,
                                const std::unordered_map<pid_t, PidStat>& members,
                                bool with_pss) const;
  std::string proc_root_;
  pid_t root_;
  std::optional<uint64_t> root_start_time_;
  bool children_files_ = true;  // cleared the first time the kernel lacks them
  long page_size_;
};

}  // namespace gpufeed
