#include "core/system/proc_text.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <string>
#include <vector>

#include "core/text.h"

namespace gpufeed {
namespace {

// Splits off the next whitespace-separated token of `text`.
std::string_view NextToken(std::string_view& text) {
  size_t begin = 0;
  while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  size_t end = begin;
  while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
  std::string_view token = text.substr(begin, end - begin);
  text.remove_prefix(end);
  return token;
}

template <typename T>
bool ParseToken(std::string_view token, T* value) {
  const std::optional<T> parsed = ParseNumber<T>(token);
  if (parsed) *value = *parsed;
  return parsed.has_value();
}

std::string_view LineAt(std::string_view text, size_t pos) {
  size_t end = text.find('\n', pos);
  return text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
}

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

bool ReadTextFile(const std::string& path, std::string* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buffer[8192];
  bool ok = true;
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    if (n == 0) break;
    out->append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return ok;
}

std::optional<CpuTicks> ParseProcStatCpu(std::string_view text) {
  if (text.substr(0, 4) != "cpu ") return std::nullopt;
  std::string_view line = LineAt(text, 4);
  uint64_t fields[8] = {};  // user nice system idle iowait irq softirq steal
  int parsed = 0;
  for (; parsed < 8; ++parsed) {
    std::string_view token = NextToken(line);
    if (token.empty()) break;
    if (!ParseToken(token, &fields[parsed])) return std::nullopt;
  }
  if (parsed < 4) return std::nullopt;
  CpuTicks ticks;
  for (int i = 0; i < parsed; ++i) ticks.total += fields[i];
  ticks.busy = ticks.total - fields[3] - fields[4];
  return ticks;
}

std::optional<MemInfo> ParseMemInfo(std::string_view text) {
  auto total = ParseKeyedValue(text, "MemTotal");
  auto available = ParseKeyedValue(text, "MemAvailable");
  if (!total || !available) return std::nullopt;
  return MemInfo{*total, *available};
}

std::optional<PidStat> ParsePidStat(std::string_view text) {
  size_t open_paren = text.find('(');
  size_t close_paren = text.rfind(')');
  if (open_paren == std::string_view::npos || close_paren == std::string_view::npos ||
      close_paren < open_paren) {
    return std::nullopt;
  }
  PidStat stat;
  std::string_view head = text.substr(0, open_paren);
  if (!ParseToken(NextToken(head), &stat.pid)) return std::nullopt;
  // Field 3 (state) is the first after ')'; fields 14-17 are utime stime cutime cstime,
  // 22 starttime, 24 rss.
  std::string_view rest = text.substr(close_paren + 1);
  std::string_view fields[22];
  for (auto& field : fields) {
    field = NextToken(rest);
    if (field.empty()) return std::nullopt;
  }
  stat.state = fields[0][0];
  int64_t cutime = 0, cstime = 0;  // signed in the kernel's format
  if (!ParseToken(fields[1], &stat.ppid) || !ParseToken(fields[11], &stat.utime) ||
      !ParseToken(fields[12], &stat.stime) || !ParseToken(fields[13], &cutime) ||
      !ParseToken(fields[14], &cstime) || !ParseToken(fields[19], &stat.start_time) ||
      !ParseToken(fields[21], &stat.rss_pages)) {
    return std::nullopt;
  }
  stat.comm = std::string(text.substr(open_paren + 1, close_paren - open_paren - 1));
  stat.cutime = cutime > 0 ? static_cast<uint64_t>(cutime) : 0;
  stat.cstime = cstime > 0 ? static_cast<uint64_t>(cstime) : 0;
  return stat;
}

std::optional<uint64_t> ParseKeyedValue(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    std::string_view line = LineAt(text, pos);
    pos += line.size() + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') {
      continue;
    }
    std::string_view rest = line.substr(key.size() + 1);
    uint64_t value = 0;
    if (!ParseToken(NextToken(rest), &value)) return std::nullopt;
    std::string_view unit = NextToken(rest);
    if (unit == "kB") return value * 1024;
    if (!unit.empty()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

std::optional<uint64_t> ParseDiskstatsReadBytes(std::string_view text) {
  struct Disk {
    std::string_view name;
    uint64_t sectors_read;
  };
  std::vector<Disk> disks;
  size_t pos = 0;
  while (pos < text.size()) {
    std::string_view line = LineAt(text, pos);
    pos += line.size() + 1;
    NextToken(line);  // major
    NextToken(line);  // minor
    std::string_view name = NextToken(line);
    NextToken(line);  // reads completed
    NextToken(line);  // reads merged
    uint64_t sectors = 0;
    if (name.empty() || !ParseToken(NextToken(line), &sectors)) continue;
    for (std::string_view skip : {"loop", "ram", "zram", "dm-", "md", "sr", "fd"}) {
      if (name.substr(0, skip.size()) == skip) {
        name = {};
        break;
      }
    }
    if (!name.empty()) disks.push_back({name, sectors});
  }
  if (disks.empty() && text.empty()) return std::nullopt;
  uint64_t bytes = 0;
  for (const Disk& disk : disks) {
    // A partition is named after its disk plus a number ("vda1", "nvme0n1p2").
    bool partition = false;
    for (const Disk& other : disks) {
      if (other.name.size() < disk.name.size() &&
          disk.name.substr(0, other.name.size()) == other.name) {
        std::string_view suffix = disk.name.substr(other.name.size());
        if (!suffix.empty() && suffix[0] == 'p') suffix.remove_prefix(1);
        if (IsDigits(suffix)) partition = true;
      }
    }
    if (!partition) bytes += disk.sectors_read * 512;
  }
  return bytes;
}

std::optional<uint64_t> ProcessStorageReadBytes() {
  std::string text;
  if (!ReadTextFile("/proc/self/io", &text)) return std::nullopt;
  return ParseKeyedValue(text, "read_bytes");
}

std::optional<uint64_t> ProcessFilePmdMappedBytes() {
  std::string text;
  if (!ReadTextFile("/proc/self/smaps_rollup", &text)) return std::nullopt;
  return ParseKeyedValue(text, "FilePmdMapped");
}

}  // namespace gpufeed
