#include "core/io/warmed_mapping.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/io/mapped_read_guard.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr uint64_t kStep = uint64_t{2} << 20;
constexpr uint64_t kPage = 4096;

// Off unless GPUFEED_MAPPING_WARMER=1 (read at each construction): measured on the 2-core VM,
// the warmer and the preads it implies cost more CPU than the first-touch traps they avoid
// (3-epoch demo runs: 0.6-0.7x the throughput of the plain mapping, for a 2x faster first
// batch), so every row comes from the mapping by default.
bool WarmerWanted() {
  const char* env = std::getenv("GPUFEED_MAPPING_WARMER");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace

WarmedMapping::WarmedMapping(const std::byte* map, uint64_t begin, uint64_t end, std::string path,
                             uint64_t min_bytes)
    : map_(map),
      begin_(begin),
      end_(std::max(begin, end)),
      path_(std::move(path)),
      owner_pid_(getpid()),
      warm_end_(map == nullptr || end_ - begin_ < min_bytes || !WarmerWanted() ? end_ : begin_),
      settled_(warm_end_.load() == end_) {}

WarmedMapping::~WarmedMapping() {
  if (!thread_) return;
  if (getpid() != owner_pid_) {
    // A forked child has no warmer thread to join: leave the handle.
    static_cast<void>(thread_.release());
    return;
  }
  stop_.store(true, std::memory_order_relaxed);
  thread_->join();
}

void WarmedMapping::StartWarming() {
  if (WarmEnd() >= end_) return;
  std::call_once(started_, [this] {
    try {
      thread_ = std::make_unique<std::thread>([this] { WarmLoop(); });
    } catch (...) {
      settled_.store(true, std::memory_order_release);
      // No thread: readers keep using pread for the cold part, which is correct, only slower.
    }
  });
}

void WarmedMapping::WarmLoop() noexcept {
  uint64_t at = begin_;
  // Page-aligned touches: the first byte of every page the range covers.
  uint64_t page = begin_ / kPage * kPage;
  while (at < end_ && !stop_.load(std::memory_order_relaxed)) {
    const uint64_t next = std::min(end_, (at / kStep + 1) * kStep);
    try {
      unsigned sum = 0;
      GuardMappedRead(path_, [&] {
        for (; page < next; page += kPage) {
          sum += static_cast<unsigned>(
              *reinterpret_cast<const volatile unsigned char*>(map_ + std::max(page, begin_)));
        }
      });
      static_cast<void>(sum);
    } catch (...) {
      break;  // the file shrank: the rest stays cold, read by pread, which says so
    }
    at = next;
    warm_end_.store(at, std::memory_order_release);
  }
  settled_.store(true, std::memory_order_release);
}

}  // namespace gpufeed
