#include "device/pinned_host_pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/system/system_memory.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

uint64_t DefaultRetainBytes() {
  return BytesFromEnv("GPUFEED_PINNED_POOL_BYTES",
                      std::min<uint64_t>(PhysicalRamBytes() / 16, uint64_t{4} << 30));
}

}  // namespace

PinnedHostPool& PinnedHostPool::Instance() {
  // Never destroyed: buffers may come back from static destructors of other objects.
  static PinnedHostPool* pool = new PinnedHostPool();
  return *pool;
}

PinnedHostPool::PinnedHostPool() : retain_(DefaultRetainBytes()) {}

void* PinnedHostPool::Take(const std::shared_ptr<const CudaContext>& context, size_t bytes) {
  const CudaDriver& driver = context->driver();
  {
    std::lock_guard lock(mu_);
    // The newest kept buffer of this size and driver: the one most likely still in cache.
    for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
      if (it->bytes != bytes || &it->context->driver() != &driver) continue;
      void* data = it->data;
      given_.emplace(data, *it);  // may throw: the buffer then stays kept
      kept_.erase(std::next(it).base());
      counters_.kept_bytes -= static_cast<int64_t>(bytes);
      ++counters_.taken_kept;
      return data;
    }
  }
  void* data = nullptr;
  {
    CurrentContextScope scope(*context);
    // PORTABLE: the pages count as pinned in every context, so PyTorch's is_pinned() agrees.
    const CUresult result = driver.MemHostAlloc(&data, bytes, kMemHostAllocPortable);
    if (result != kSuccess) {
      throw Error(ErrorCode::kDevice,
                  fmt::format("{}: cannot pin a {} byte ({:.1f} MiB) host batch buffer: {}; "
                              "lower batch_size, workers or prefetch, or raise the locked-memory "
                              "limit",
                              context->name(), bytes, static_cast<double>(bytes) / (1 << 20),
                              driver.Describe(result)));
    }
  }
  std::lock_guard lock(mu_);
  try {
    given_.emplace(data, Buffer{data, bytes, context});
  } catch (...) {
    CurrentContextScope scope(*context);
    driver.MemFreeHost(data);
    throw;
  }
  ++counters_.taken_fresh;
  return data;
}

bool PinnedHostPool::Give(void* data) noexcept {
  if (data == nullptr || InForkedChild()) return false;
  std::lock_guard lock(mu_);
  const auto out = given_.find(data);
  if (out == given_.end()) return false;
  Buffer buffer = std::move(out->second);
  given_.erase(out);
  try {
    kept_.push_back(std::move(buffer));
  } catch (...) {  // no memory for the list entry: unpin it instead
    Unpin(buffer);
    return true;
  }
  counters_.kept_bytes += static_cast<int64_t>(kept_.back().bytes);
  TrimToBudgetLocked();
  return true;
}

void PinnedHostPool::Unpin(Buffer& buffer) noexcept {
  try {
    CurrentContextScope scope(*buffer.context);
    buffer.context->driver().MemFreeHost(buffer.data);
  } catch (...) {
  }
  buffer.context.reset();  // the context's last reference may go here
  ++counters_.freed;
}

void PinnedHostPool::TrimToBudgetLocked() noexcept {
  size_t drop = 0;
  while (static_cast<uint64_t>(counters_.kept_bytes) > retain_ && drop < kept_.size()) {
    counters_.kept_bytes -= static_cast<int64_t>(kept_[drop].bytes);
    Unpin(kept_[drop]);
    ++drop;
  }
  kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(drop));
}

uint64_t PinnedHostPool::Trim() noexcept {
  if (InForkedChild()) return 0;
  std::lock_guard lock(mu_);
  const auto freed = static_cast<uint64_t>(counters_.kept_bytes);
  for (Buffer& buffer : kept_) Unpin(buffer);
  kept_.clear();
  counters_.kept_bytes = 0;
  return freed;
}

PinnedHostPool::Counters PinnedHostPool::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void PinnedHostPool::SetRetainBytes(uint64_t bytes) noexcept {
  std::lock_guard lock(mu_);
  retain_ = bytes;
  TrimToBudgetLocked();
}

}  // namespace gpufeed::cuda
