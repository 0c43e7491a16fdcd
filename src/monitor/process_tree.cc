#include "monitor/process_tree.h"

#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <unordered_map>

#include "core/system/proc_text.h"
#include "core/text.h"

namespace gpufeed {
namespace {

std::optional<pid_t> ParsePid(const char* name) {
  const std::optional<pid_t> pid = ParseNumber<pid_t>(name);
  if (!pid || *pid <= 0) return std::nullopt;
  return pid;
}

std::vector<std::string> ListDirectory(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
  }
  closedir(dir);
  return names;
}

}  // namespace

ProcessTreeReader::ProcessTreeReader(std::string proc_root, pid_t root)
    : proc_root_(std::move(proc_root)), root_(root), page_size_(sysconf(_SC_PAGESIZE)) {}

std::vector<pid_t> ProcessTreeReader::ChildrenFromTaskFiles(pid_t pid, bool* supported) {
  std::vector<pid_t> children;
  std::string task_dir = fmt::format("{}/{}/task", proc_root_, pid);
  std::string text;
  for (const std::string& tid : ListDirectory(task_dir)) {
    if (!ReadTextFile(fmt::format("{}/{}/children", task_dir, tid), &text)) {
      // The task may have just exited; the kernel lacks the file when the first one fails.
      if (children.empty() && access(fmt::format("{}/{}", task_dir, tid).c_str(), F_OK) == 0) {
        *supported = false;
        return {};
      }
      continue;
    }
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end) {
      pid_t child = 0;
      auto [next, ec] = std::from_chars(p, end, child);
      if (ec == std::errc()) {
        children.push_back(child);
        p = next;
      } else {
        ++p;
      }
    }
  }
  return children;
}

// The reading of the tree's members, in `order`: CPU ticks of every member (zombies
// included), and memory and reads of the live ones.
ProcessTreeReading ProcessTreeReader::SumMembers(const std::vector<pid_t>& order,
                                                 const std::unordered_map<pid_t, PidStat>& members,
                                                 bool with_pss) const {
  std::string text;
  ProcessTreeReading reading;
  uint64_t pss_total = 0, read_total = 0;
  bool any_pss = false, any_read = false;
  for (pid_t pid : order) {
    const PidStat& stat = members.at(pid);
    reading.cpu_ticks += stat.utime + stat.stime + stat.cutime + stat.cstime;
    if (stat.state == 'Z' || stat.state == 'X') continue;  // counted its time; no memory
    reading.pids.push_back(pid);
    const uint64_t rss =
        stat.rss_pages > 0 ? static_cast<uint64_t>(stat.rss_pages) * page_size_ : 0;
    reading.rss_bytes += rss;
    reading.members.push_back({.pid = pid,
                               .ppid = stat.ppid,
                               .name = stat.comm,
                               .start_time = stat.start_time,
                               .own_ticks = stat.utime + stat.stime,
                               .rss_bytes = rss});
    if (with_pss && ReadTextFile(fmt::format("{}/{}/smaps_rollup", proc_root_, pid), &text)) {
      if (auto pss = ParseKeyedValue(text, "Pss")) {
        pss_total += *pss;
        any_pss = true;
      }
    }
    if (ReadTextFile(fmt::format("{}/{}/io", proc_root_, pid), &text)) {
      if (auto bytes = ParseKeyedValue(text, "read_bytes")) {
        read_total += *bytes;
        any_read = true;
      }
    }
  }
  if (any_pss) reading.pss_bytes = pss_total;
  if (any_read) reading.read_bytes = read_total;
  return reading;
}

std::optional<ProcessTreeReading> ProcessTreeReader::Read(bool with_pss) {
  std::string text;
  std::unordered_map<pid_t, PidStat> members;
  std::vector<pid_t> order;

  if (!ReadTextFile(fmt::format("{}/{}/stat", proc_root_, root_), &text)) return std::nullopt;
  auto root_stat = ParsePidStat(text);
  if (!root_stat || root_stat->state == 'Z' || root_stat->state == 'X') return std::nullopt;
  if (!root_start_time_) root_start_time_ = root_stat->start_time;
  if (*root_start_time_ != root_stat->start_time) return std::nullopt;  // pid reused
  members.emplace(root_, *root_stat);
  order.push_back(root_);

  bool supported = children_files_;
  if (children_files_) {
    for (size_t i = 0; i < order.size() && supported; ++i) {
      for (pid_t child : ChildrenFromTaskFiles(order[i], &supported)) {
        if (members.count(child) != 0) continue;
        if (!ReadTextFile(fmt::format("{}/{}/stat", proc_root_, child), &text)) continue;
        if (auto stat = ParsePidStat(text)) {
          members.emplace(child, *stat);
          order.push_back(child);
        }
      }
    }
    if (!supported) {
      children_files_ = false;
      members.erase(members.begin(), members.end());
      members.emplace(root_, *root_stat);
      order.assign(1, root_);
    }
  }
  if (!children_files_) {
    std::unordered_map<pid_t, std::vector<PidStat>> by_parent;
    for (const std::string& name : ListDirectory(proc_root_)) {
      auto pid = ParsePid(name.c_str());
      if (!pid || *pid == root_) continue;
      if (!ReadTextFile(fmt::format("{}/{}/stat", proc_root_, *pid), &text)) continue;
      if (auto stat = ParsePidStat(text)) by_parent[stat->ppid].push_back(*stat);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      auto it = by_parent.find(order[i]);
      if (it == by_parent.end()) continue;
      for (const PidStat& child : it->second) {
        if (members.emplace(child.pid, child).second) order.push_back(child.pid);
      }
    }
  }

  return SumMembers(order, members, with_pss);
}

}  // namespace gpufeed
