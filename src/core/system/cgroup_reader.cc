#include "core/system/cgroup_reader.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <string_view>

#include "core/system/proc_text.h"
#include "core/text.h"

namespace gpufeed {
namespace {

// Kernels print "unlimited" as the largest page-aligned int64 (v1) or as "max" (v2).
constexpr uint64_t kUnlimitedAbove = uint64_t{1} << 60;

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::string text;
  if (!ReadTextFile(path, &text)) return std::nullopt;
  return ParseNumber<uint64_t>(Trim(text));
}

std::optional<uint64_t> Limit(std::optional<uint64_t> value) {
  if (value && *value >= kUnlimitedAbove) return std::nullopt;
  return value;
}

// `key value` lines (cpu.stat).
std::optional<uint64_t> StatValue(const std::string& text, std::string_view key) {
  for (const std::string_view line : Split(text, '\n')) {
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      uint64_t value = 0;
      auto rest = line.substr(key.size() + 1);
      auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
      if (ec == std::errc()) return value;
    }
  }
  return std::nullopt;
}

}  // namespace

CgroupReader::CgroupReader(const std::string& proc_root, const std::string& cgroup_root,
                           pid_t pid)
    : CgroupReader(fmt::format("{}/{}/cgroup", proc_root, pid), cgroup_root) {}

CgroupReader CgroupReader::Self(const std::string& proc_root, const std::string& cgroup_root) {
  return CgroupReader(proc_root + "/self/cgroup", cgroup_root);
}

CgroupReader::CgroupReader(const std::string& proc_cgroup_file, const std::string& cgroup_root) {
  std::string text;
  if (!ReadTextFile(proc_cgroup_file, &text)) return;
  std::string v2_root;
  if (Exists(cgroup_root + "/cgroup.controllers")) {
    v2_root = cgroup_root;
  } else if (Exists(cgroup_root + "/unified/cgroup.controllers")) {
    v2_root = cgroup_root + "/unified";
  }
  for (const std::string_view line : Split(text, '\n')) {
    size_t first = line.find(':');
    size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    std::string path(line.substr(second + 1));
    if (path == "/") path.clear();
    if (controllers.empty() && !v2_root.empty()) {
      // Leaf first, then each ancestor up to the mount root.
      std::string dir = v2_root + path;
      for (;;) {
        v2_chain_.push_back(dir);
        if (dir.size() <= v2_root.size()) break;
        dir.resize(dir.rfind('/'));
      }
    }
    auto has = [&](std::string_view name) {
      size_t at = 0;
      while (at <= controllers.size()) {
        size_t comma = controllers.find(',', at);
        if (comma == std::string_view::npos) comma = controllers.size();
        if (controllers.substr(at, comma - at) == name) return true;
        at = comma + 1;
      }
      return false;
    };
    if (has("cpu") && Exists(cgroup_root + "/cpu" + path + "/cpu.cfs_quota_us")) {
      v1_cpu_dir_ = cgroup_root + "/cpu" + path;
    }
    if (has("memory") && Exists(cgroup_root + "/memory" + path + "/memory.limit_in_bytes")) {
      v1_memory_dir_ = cgroup_root + "/memory" + path;
    }
  }
}

CgroupReading CgroupReader::Read() const {
  CgroupReading reading;
  std::string text;
  for (const std::string& dir : v2_chain_) {
    if (ReadTextFile(dir + "/cpu.max", &text)) {
      // "$MAX $PERIOD", "max 100000" when unlimited.
      double quota = 0, period = 0;
      if (text.rfind("max", 0) != 0 && std::sscanf(text.c_str(), "%lf %lf", &quota, &period) == 2 &&
          quota > 0 && period > 0) {
        double cores = quota / period;
        if (!reading.cpu_limit_cores || cores < *reading.cpu_limit_cores) {
          reading.cpu_limit_cores = cores;
        }
      }
    }
    if (auto limit = Limit(ReadNumber(dir + "/memory.max"))) {
      if (!reading.memory_limit_bytes || *limit < *reading.memory_limit_bytes) {
        reading.memory_limit_bytes = limit;
      }
    }
  }
  if (!v2_chain_.empty()) {
    const std::string& leaf = v2_chain_.front();
    if (ReadTextFile(leaf + "/cpu.stat", &text)) {
      if (auto usec = StatValue(text, "throttled_usec"))
        reading.cpu_throttled_seconds = *usec / 1e6;
      reading.cpu_throttled_periods = StatValue(text, "nr_throttled");
    }
    reading.memory_used_bytes = ReadNumber(leaf + "/memory.current");
  }
  if (!v1_cpu_dir_.empty()) {
    if (!reading.cpu_limit_cores) {
      auto quota = ReadNumber(v1_cpu_dir_ + "/cpu.cfs_quota_us");  // "-1": no parse, no limit
      auto period = ReadNumber(v1_cpu_dir_ + "/cpu.cfs_period_us");
      if (quota && period && *period > 0) reading.cpu_limit_cores = double(*quota) / *period;
    }
    if (!reading.cpu_throttled_periods && ReadTextFile(v1_cpu_dir_ + "/cpu.stat", &text)) {
      if (auto ns = StatValue(text, "throttled_time")) reading.cpu_throttled_seconds = *ns / 1e9;
      reading.cpu_throttled_periods = StatValue(text, "nr_throttled");
    }
  }
  if (!v1_memory_dir_.empty()) {
    if (!reading.memory_limit_bytes) {
      reading.memory_limit_bytes = Limit(ReadNumber(v1_memory_dir_ + "/memory.limit_in_bytes"));
    }
    if (!reading.memory_used_bytes) {
      reading.memory_used_bytes = ReadNumber(v1_memory_dir_ + "/memory.usage_in_bytes");
    }
  }
  return reading;
}

}  // namespace gpufeed
