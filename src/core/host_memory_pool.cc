#include "core/host_memory_pool.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/system/system_memory.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kSmallPage = size_t{4} << 10;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and we write pages
#endif

uint64_t DefaultRetainBytes() {
  return BytesFromEnv("GPUFEED_HOST_POOL_BYTES",
                      std::min<uint64_t>(PhysicalRamBytes() / 8, uint64_t{8} << 30));
}

// Faults every page of a fresh block in on this thread. MADV_POPULATE_WRITE does it in one
// call (the kernel zeroes the pages; no pass over them from user space).
void FaultIn(void* p, size_t bytes) {
  if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
  auto* b = static_cast<volatile char*>(p);
  for (size_t at = 0; at < bytes; at += 4096) b[at] = 0;
}

}  // namespace

HostMemoryPool& HostMemoryPool::Instance() {
  // Never destroyed: buffers may come back from static destructors of other objects.
  static HostMemoryPool* pool = new HostMemoryPool();
  return *pool;
}

HostMemoryPool::HostMemoryPool() : retain_(DefaultRetainBytes()) {}

size_t HostMemoryPool::Rounded(size_t bytes) {
  const size_t huge = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (huge - bytes <= bytes / 8) return huge;
  // A whole last 2 MB page would waste more than an eighth (a batch of 256 8 KiB rows and
  // its labels, 2 MB + 2 KB, took 4 MB): whole 4 KiB pages instead. The block still starts
  // on a 2 MB boundary, so all its whole 2 MB pages can be huge ones.
  return (bytes + kSmallPage - 1) / kSmallPage * kSmallPage;
}

void* HostMemoryPool::Take(size_t bytes) {
  const size_t size = Rounded(std::max<size_t>(bytes, 1));
  {
    std::lock_guard lock(mu_);
    auto it = kept_.find(size);
    if (it != kept_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      counters_.kept_bytes -= static_cast<int64_t>(size);
      ++counters_.taken_kept;
      given_.emplace(p, size);
      return p;
    }
  }
  // posix_memalign, not aligned_alloc: the size need not be a multiple of the alignment.
  const auto start = std::chrono::steady_clock::now();
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, size) != 0) p = nullptr;
  if (p == nullptr) {
    throw Error(ErrorCode::kDevice,
                fmt::format("out of host memory allocating a {} byte batch buffer", bytes));
  }
  // A hint (fine if refused) over the whole 2 MB pages only: a huge page for a 4 KiB-rounded
  // tail would fault in the 2 MB the rounding saved.
  if (const size_t whole = size / kHugePage * kHugePage; whole > 0) {
    madvise(p, whole, MADV_HUGEPAGE);
  }
  FaultIn(p, size);
  const int64_t fault_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  std::lock_guard lock(mu_);
  try {
    given_.emplace(p, size);
  } catch (...) {
    std::free(p);
    throw;
  }
  ++counters_.taken_fresh;
  counters_.fresh_bytes += static_cast<int64_t>(size);
  counters_.fault_ns += fault_ns;
  return p;
}

bool HostMemoryPool::Give(void* block) noexcept {
  if (block == nullptr) return false;
  std::lock_guard lock(mu_);
  const auto out = given_.find(block);
  if (out == given_.end()) return false;
  const size_t size = out->second;
  given_.erase(out);
  try {
    kept_[size].push_back(block);
  } catch (...) {  // no memory for the list entry: free the block instead
    std::free(block);
    ++counters_.freed;
    return true;
  }
  counters_.kept_bytes += static_cast<int64_t>(size);
  TrimToBudgetLocked();
  return true;
}

void HostMemoryPool::TrimToBudgetLocked() noexcept {
  // The size holding the most bytes gives its oldest block first.
  while (static_cast<uint64_t>(counters_.kept_bytes) > retain_ && !kept_.empty()) {
    auto victim = kept_.begin();
    size_t most = 0;
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      const size_t held = it->first * it->second.size();
      if (held > most) {
        most = held;
        victim = it;
      }
    }
    auto& blocks = victim->second;
    std::free(blocks.front());
    blocks.erase(blocks.begin());
    counters_.kept_bytes -= static_cast<int64_t>(victim->first);
    ++counters_.freed;
    if (blocks.empty()) kept_.erase(victim);
  }
}

uint64_t HostMemoryPool::Trim() noexcept {
  std::lock_guard lock(mu_);
  const auto freed = static_cast<uint64_t>(counters_.kept_bytes);
  for (auto& [size, blocks] : kept_) {
    for (void* p : blocks) std::free(p);
    counters_.freed += static_cast<int64_t>(blocks.size());
  }
  kept_.clear();
  counters_.kept_bytes = 0;
  return freed;
}

HostMemoryPool::Counters HostMemoryPool::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void HostMemoryPool::SetRetainBytes(uint64_t bytes) noexcept {
  std::lock_guard lock(mu_);
  retain_ = bytes;
  TrimToBudgetLocked();
}

}  // namespace gpufeed
