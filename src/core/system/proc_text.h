// Parsers for the /proc text files the monitor reads. Pure functions over the file's text,
// so tests feed them exact strings; each returns nullopt for text it cannot make sense of
// (a bad line is a missing reading, never a crash). Thread-safety: stateless.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpufeed {

// Reads a whole (small, pseudo) file. False when it cannot be opened or read.
bool ReadTextFile(const std::string& path, std::string* out);

// The aggregate `cpu` line of /proc/stat, in USER_HZ ticks. busy = total - idle - iowait;
// guest and guest_nice are already inside user and nice, so they are not added again.
struct CpuTicks {
  uint64_t busy = 0;
  uint64_t total = 0;
};
std::optional<CpuTicks> ParseProcStatCpu(std::string_view text);

// MemTotal and MemAvailable of /proc/meminfo, in bytes.
struct MemInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};
std::optional<MemInfo> ParseMemInfo(std::string_view text);

// /proc/<pid>/stat, parsed after the last ')' because comm may hold spaces and parens.
struct PidStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  uint64_t utime = 0;  // ticks
  uint64_t stime = 0;
  uint64_t cutime = 0;  // waited-for children only
  uint64_t cstime = 0;
  uint64_t start_time = 0;  // ticks after boot: tells a reused pid apart
  int64_t rss_pages = 0;
  std::string comm;  // between the first '(' and the last ')'
};
std::optional<PidStat> ParsePidStat(std::string_view text);

// The value of a `Key:   123 kB` line (smaps_rollup, status, meminfo) in bytes, or of a
// `key: 123` line (io) as is when the line has no kB suffix.
std::optional<uint64_t> ParseKeyedValue(std::string_view text, std::string_view key);

// Bytes this process has caused to be fetched from storage (/proc/self/io read_bytes: reads
// and page faults that reached a device, not those served by the page cache); nullopt where
// the kernel does not say.
std::optional<uint64_t> ProcessStorageReadBytes();

// This process's file pages mapped by PMDs, 2 MiB at a time (/proc/self/smaps_rollup
// FilePmdMapped), in bytes; nullopt where the kernel does not say.
std::optional<uint64_t> ProcessFilePmdMappedBytes();

// Bytes read from whole disks in /proc/diskstats (sectors are always 512 bytes). Loop, ram,
// zram, device-mapper and md devices and partitions are left out so no read counts twice.
std::optional<uint64_t> ParseDiskstatsReadBytes(std::string_view text);

}  // namespace gpufeed
