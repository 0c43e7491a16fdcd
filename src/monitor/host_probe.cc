#include "monitor/host_probe.h"

#include <unistd.h>

#include <algorithm>

#include "core/system/system_memory.h"

namespace gpufeed {
namespace {

constexpr std::chrono::seconds kPssPeriod{1};

}  // namespace

HostProbe::HostProbe(const std::string& proc_root, const std::string& cgroup_root, pid_t pid)
    : proc_root_(proc_root),
      tree_(proc_root, pid),
      cgroup_(proc_root, cgroup_root, pid),
      ticks_per_second_(static_cast<double>(sysconf(_SC_CLK_TCK))),
      cpu_count_(OnlineCpus()) {}

HostSample HostProbe::Sample(TimePoint now, std::vector<pid_t>* tree_pids) {
  HostSample sample;
  sample.cpu_count = cpu_count_;
  double dt = 0;
  if (last_time_) dt = std::chrono::duration<double>(now - *last_time_).count();
  SampleMachine(dt, sample);
  SampleTree(now, dt, sample, tree_pids);

  CgroupReading cgroup = cgroup_.Read();
  sample.cgroup_cpu_limit_cores = cgroup.cpu_limit_cores;
  sample.cgroup_cpu_throttled_seconds_total = cgroup.cpu_throttled_seconds;
  sample.cgroup_cpu_throttled_periods_total = cgroup.cpu_throttled_periods;
  sample.cgroup_memory_limit_bytes = cgroup.memory_limit_bytes;
  sample.cgroup_memory_used_bytes = cgroup.memory_used_bytes;

  last_time_ = now;
  return sample;
}

void HostProbe::SampleMachine(double dt, HostSample& sample) {
  const bool rates = dt > 0;
  std::string text;
  if (ReadTextFile(proc_root_ + "/stat", &text)) {
    if (auto cpu = ParseProcStatCpu(text)) {
      if (!last_cpu_ || cpu->total < last_cpu_->total || cpu->busy < last_cpu_->busy) {
        last_cpu_ = cpu;
      } else if (cpu->total > last_cpu_->total) {
        last_cpu_ratio_ =
            double(cpu->busy - last_cpu_->busy) / double(cpu->total - last_cpu_->total);
        last_cpu_ = cpu;
      }
      // Two samples within one clock tick: repeat the last figure rather than claim none.
      sample.cpu_utilization_ratio = last_cpu_ratio_;
    }
  }
  if (ReadTextFile(proc_root_ + "/meminfo", &text)) {
    if (auto mem = ParseMemInfo(text)) {
      sample.memory_total_bytes = mem->total_bytes;
      sample.memory_used_bytes =
          mem->total_bytes - std::min(mem->available_bytes, mem->total_bytes);
    }
  }
  if (ReadTextFile(proc_root_ + "/diskstats", &text)) {
    if (auto bytes = ParseDiskstatsReadBytes(text)) {
      sample.disk_read_bytes_total = bytes;
      if (rates && last_disk_read_ && *bytes >= *last_disk_read_) {
        sample.disk_read_bytes_per_second = double(*bytes - *last_disk_read_) / dt;
      }
      last_disk_read_ = bytes;
    }
  }
}

void HostProbe::SampleTree(TimePoint now, double dt, HostSample& sample,
                           std::vector<pid_t>* tree_pids) {
  const bool rates = dt > 0;
  bool want_pss = !last_pss_time_ || now - *last_pss_time_ >= kPssPeriod;
  tree_pids->clear();
  if (auto tree = tree_.Read(want_pss)) {
    *tree_pids = tree->pids;
    sample.tree_processes = static_cast<int>(tree->pids.size());
    // A member re-parented out of the tree takes its ticks along: count no negative time.
    if (last_tree_ticks_) {
      if (tree->cpu_ticks > *last_tree_ticks_) {
        tree_cpu_seconds_ += double(tree->cpu_ticks - *last_tree_ticks_) / ticks_per_second_;
        if (rates) {
          sample.tree_cpu_cores =
              double(tree->cpu_ticks - *last_tree_ticks_) / ticks_per_second_ / dt;
        }
      } else if (rates) {
        sample.tree_cpu_cores = 0.0;
      }
    } else {
      tree_cpu_seconds_ = double(tree->cpu_ticks) / ticks_per_second_;
    }
    last_tree_ticks_ = tree->cpu_ticks;
    sample.tree_cpu_seconds_total = tree_cpu_seconds_;
    sample.tree_rss_bytes = tree->rss_bytes;
    std::unordered_map<pid_t, MemberTicks> member_ticks;
    for (const ProcessTreeMember& m : tree->members) {
      ProcessSample p{
          .pid = m.pid, .ppid = m.ppid, .name = m.name, .cpu_cores = {}, .rss_bytes = m.rss_bytes};
      auto last = last_member_ticks_.find(m.pid);
      if (rates && last != last_member_ticks_.end() && last->second.start_time == m.start_time &&
          m.own_ticks >= last->second.ticks) {
        p.cpu_cores = double(m.own_ticks - last->second.ticks) / ticks_per_second_ / dt;
      }
      member_ticks[m.pid] = {m.start_time, m.own_ticks};
      sample.processes.push_back(std::move(p));
    }
    last_member_ticks_ = std::move(member_ticks);
    if (want_pss) {
      last_pss_time_ = now;
      last_pss_ = tree->pss_bytes;
    }
    sample.tree_pss_bytes = last_pss_;
    if (tree->read_bytes) {
      if (last_tree_read_) {
        uint64_t delta =
            *tree->read_bytes > *last_tree_read_ ? *tree->read_bytes - *last_tree_read_ : 0;
        tree_read_bytes_ += delta;
        if (rates) sample.tree_read_bytes_per_second = double(delta) / dt;
      } else {
        tree_read_bytes_ = *tree->read_bytes;
      }
      last_tree_read_ = tree->read_bytes;
      sample.tree_read_bytes_total = tree_read_bytes_;
    }
  }
}

}  // namespace gpufeed
