// WarmedMapping: a file's read-only mapping that a background thread warms page by page,
// and the boundary up to which it is warm, so readers copy rows from the mapping where that
// is cheap and read them with pread where it is not yet.
//
// Why (bench/stream_gather.cc, README "Streaming at memory speed"): on a VM the first access
// to each 4 KB page of a new mapping traps (shadow or nested paging) and costs microseconds,
// so a new process's first batches from a mapping ran 5-10x slower than later ones (the first
// batch of 8192 random 8 KB rows took 0.5-0.8 s, fault-around mapping most of the file);
// MAP_POPULATE, MADV_POPULATE_READ, MADV_WILLNEED and MADV_HUGEPAGE did not change that.
// pread copies through the kernel's own (huge-page) map and pays no such trap, but pays a
// system call per row: 2-4 GB/s on 2 threads against 7-16 GB/s from a warm mapping. So
// rows come from pread until the mapping is warm where they lie, and from the mapping after.
//
// The warmer starts on the first StartWarming() (the first batch read, not the open), reads
// one byte per page in 2 MiB steps inside GuardMappedRead (a file truncated under it stops
// the warming: readers keep using pread, which reports the short file), and publishes how far
// it got. It is stopped and joined by the destructor (in a process forked from the owner,
// where the thread does not exist, it is left alone).
//
// The warmer is off unless GPUFEED_MAPPING_WARMER=1: then every range counts as warm from the
// start and every row comes from the mapping. Measured on the 2-core VM (README), the warmer
// halves a new process's first batch but its preads and its own touches cost more CPU than
// the traps they avoid: a 3-epoch demo run streamed 0.6-0.7x as fast. So it is opt-in, for
// a first batch that must come fast (a short validation pass, a process per trial).
//
// Thread-safety: thread-safe; WarmEnd may be read by any number of readers.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace gpufeed {

class WarmedMapping {
 public:
  // Warms [begin, end) of `map` (a mapping of the file at `path`, for messages). A range
  // smaller than `min_bytes` is not worth a thread: it counts as warm from the start (its
  // few pages trap once, in the readers).
  WarmedMapping(const std::byte* map, uint64_t begin, uint64_t end, std::string path,
                uint64_t min_bytes = kMinWarmedBytes);
  ~WarmedMapping();
  WarmedMapping(const WarmedMapping&) = delete;
  WarmedMapping& operator=(const WarmedMapping&) = delete;

  // Starts the warmer once; later calls do nothing.
  void StartWarming();
  // Bytes of the file, from its start, that are warm: [0, WarmEnd()) below `begin` counts.
  uint64_t WarmEnd() const { return warm_end_.load(std::memory_order_acquire); }
  bool Warm(uint64_t end_offset) const { return end_offset <= WarmEnd(); }
  const std::byte* map() const { return map_; }
  // True once the warmer has ended: at the end of the range, or stopped early (a file that
  // shrank). For tests and benchmarks.
  bool Settled() const { return settled_.load(std::memory_order_acquire); }

  static constexpr uint64_t kMinWarmedBytes = uint64_t{32} << 20;

 private:
  void WarmLoop() noexcept;

  const std::byte* const map_;
  const uint64_t begin_;
  const uint64_t end_;
  const std::string path_;
  const pid_t owner_pid_;
  std::atomic<uint64_t> warm_end_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> settled_{false};
  std::once_flag started_;
  std::unique_ptr<std::thread> thread_;  // set inside call_once, read by the destructor
};

}  // namespace gpufeed
