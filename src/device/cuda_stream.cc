#include "device/cuda_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "device/kernels/gather_ptx.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {

std::shared_ptr<CudaEvent> CudaEvent::RecordOn(std::shared_ptr<const CudaContext> context,
                                               CUstream stream, CudaCounters& counters) {
  const CudaDriver& driver = context->driver();
  CurrentContextScope scope(*context);
  CUevent event = nullptr;
  context->Check(driver.EventCreate(&event, kEventDisableTiming), "cuEventCreate");
  // Owned from here on, so a failed record below still destroys it.
  std::shared_ptr<CudaEvent> owner(new CudaEvent(std::move(context), event));
  owner->context_->Check(driver.EventRecord(event, stream), "cuEventRecord");
  counters.events.fetch_add(1, std::memory_order_relaxed);
  return owner;
}

CudaEvent::CudaEvent(std::shared_ptr<const CudaContext> context, CUevent event)
    : context_(std::move(context)), event_(event) {}

CudaEvent::~CudaEvent() {
  // cuEventDestroy does not wait for a pending event; failing here (driver shutting down at
  // exit) leaves nothing to clean up.
  try {
    CurrentContextScope scope(*context_);
    context_->driver().EventDestroy(event_);
  } catch (...) {
  }
}

void CudaEvent::Fail(CUresult result) {
  CUresult expected = kSuccess;
  failure_.compare_exchange_strong(expected, result);
  done_.store(true, std::memory_order_release);
}

bool CudaEvent::IsDone() {
  if (done_.load(std::memory_order_acquire)) return true;
  // Called under the buffer pool's lock and from noexcept code: never throws. A context
  // that cannot be made current counts as a failure, reported by Wait().
  CUresult result;
  try {
    CurrentContextScope scope(*context_);
    result = context_->driver().EventQuery(event_);
  } catch (...) {
    result = kErrorInvalidContext;
  }
  if (result == kErrorNotReady) return false;
  if (result == kSuccess) {
    done_.store(true, std::memory_order_release);
  } else {
    Fail(result);
  }
  return true;
}

void CudaEvent::Wait() {
  if (!done_.load(std::memory_order_acquire)) {
    CurrentContextScope scope(*context_);
    const CUresult result = context_->driver().EventSynchronize(event_);
    if (result == kSuccess) {
      done_.store(true, std::memory_order_release);
    } else {
      Fail(result);
    }
  }
  const CUresult failure = failure_.load();
  if (failure != kSuccess) {
    throw Error(ErrorCode::kDevice,
                fmt::format("{}: the copy of a batch to the device failed: {}", context_->name(),
                            context_->driver().Describe(failure)));
  }
}

void CudaEvent::MakeStreamWait(uintptr_t stream) {
  // DLPack's stream values pass through as CUstream handles: 1 is CU_STREAM_LEGACY and 2
  // CU_STREAM_PER_THREAD in the driver API too, and 0 the default stream.
  CurrentContextScope scope(*context_);
  context_->Check(context_->driver().StreamWaitEvent(reinterpret_cast<CUstream>(stream), event_,
                                                     kEventWaitDefault),
                  "cuStreamWaitEvent");
}

CudaTimingEvent::CudaTimingEvent(std::shared_ptr<const CudaContext> context)
    : context_(std::move(context)) {
  CurrentContextScope scope(*context_);
  // Timing enabled (kEventDefault): the one event kind that costs a timestamp.
  context_->Check(context_->driver().EventCreate(&event_, kEventDefault), "cuEventCreate");
}

CudaTimingEvent::~CudaTimingEvent() {
  try {
    CurrentContextScope scope(*context_);
    context_->driver().EventDestroy(event_);
  } catch (...) {
  }
}

void CudaTimingEvent::Record(uintptr_t stream) {
  CurrentContextScope scope(*context_);
  context_->Check(context_->driver().EventRecord(event_, reinterpret_cast<CUstream>(stream)),
                  "cuEventRecord");
}

bool CudaTimingEvent::IsDone() {
  try {
    CurrentContextScope scope(*context_);
    return context_->driver().EventQuery(event_) != kErrorNotReady;
  } catch (...) {
    return true;  // no context: nothing will ever complete it; MillisecondsSince says no
  }
}

std::optional<double> CudaTimingEvent::MillisecondsSince(TimingEvent& earlier) {
  auto* start = dynamic_cast<CudaTimingEvent*>(&earlier);
  const auto elapsed = context_->driver().EventElapsedTime;
  if (start == nullptr || elapsed == nullptr) return std::nullopt;
  try {
    CurrentContextScope scope(*context_);
    float ms = 0;
    if (elapsed(&ms, start->event_, event_) != kSuccess) return std::nullopt;
    return static_cast<double>(ms);
  } catch (...) {
    return std::nullopt;
  }
}

CudaStream::CudaStream(std::shared_ptr<const CudaContext> context,
                       std::shared_ptr<CudaCounters> counters)
    : context_(std::move(context)), counters_(std::move(counters)) {
  CurrentContextScope scope(*context_);
  context_->Check(context_->driver().StreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
}

CudaStream::~CudaStream() {
  // Returns at once; copies still queued complete and their events still fire. Only index
  // buffers a queued gather may still read make it wait first.
  try {
    CurrentContextScope scope(*context_);
    const bool has_slots =
        std::any_of(slots_.begin(), slots_.end(), [](const IndexSlot& s) { return s.capacity; });
    if (has_slots) context_->driver().StreamSynchronize(stream_);
    for (IndexSlot& slot : slots_) FreeSlot(slot);
    context_->driver().StreamDestroy(stream_);
  } catch (...) {
  }
}

void CudaStream::FreeSlot(IndexSlot& slot) noexcept {
  // REQUIRES: the context is current and nothing queued reads the slot.
  if (slot.host != nullptr) context_->driver().MemFreeHost(slot.host);
  if (slot.device != 0) context_->driver().MemFree(slot.device);
  slot = IndexSlot{};
}

CudaStream::IndexSlot& CudaStream::TakeSlot(size_t count) {
  IndexSlot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % kIndexSlots;
  if (slot.last_use) {
    slot.last_use->Wait();  // throws when that gather failed: the stream is broken anyway
    slot.last_use.reset();
  }
  if (slot.capacity >= count) return slot;
  FreeSlot(slot);
  const size_t capacity = std::max<size_t>(count, 1024);
  const size_t bytes = capacity * sizeof(int64_t);
  const CudaDriver& driver = context_->driver();
  void* host = nullptr;
  const auto fail = [&](CUresult result, const char* what) {
    FreeSlot(slot);
    throw Error(ErrorCode::kDevice,
                fmt::format("{}: cannot allocate the {} byte {} index buffer of a gather: {}",
                            context_->name(), bytes, what, driver.Describe(result)));
  };
  if (CUresult r = driver.MemHostAlloc(&host, bytes, kMemHostAllocPortable); r != kSuccess) {
    fail(r, "pinned");
  }
  slot.host = static_cast<int64_t*>(host);
  if (CUresult r = driver.MemAlloc(&slot.device, bytes); r != kSuccess) fail(r, "device");
  slot.capacity = capacity;
  counters_->host_bytes_allocated.fetch_add(static_cast<int64_t>(bytes));
  counters_->device_bytes_allocated.fetch_add(static_cast<int64_t>(bytes));
  return slot;
}

void CudaStream::LaunchGather(const GatherField& field, CUdeviceptr rows, size_t count) {
  const CudaDriver& driver = context_->driver();
  const GatherKernels& kernels = context_->gather_kernels();
  const auto aligned = [&](size_t word) {
    return field.row_bytes % word == 0 && reinterpret_cast<uintptr_t>(field.dst) % word == 0 &&
           reinterpret_cast<uintptr_t>(field.src) % word == 0;
  };
  const size_t word = aligned(16) ? 16 : aligned(4) ? 4 : 1;
  CUfunction kernel = word == 16 ? kernels.words16 : word == 4 ? kernels.words4 : kernels.words1;
  // gather.cu's parameters, packed: the driver checks the buffer's size against the kernel's.
  struct {
    CUdeviceptr dst;
    CUdeviceptr src;
    uint64_t row_words;
    CUdeviceptr rows;
    uint64_t count;
  } params{reinterpret_cast<CUdeviceptr>(field.dst), reinterpret_cast<CUdeviceptr>(field.src),
           field.row_bytes / word, rows, count};
  static_assert(sizeof(params) == kGatherParamBytes);
  size_t params_size = sizeof(params);
  void* extra[] = {kLaunchParamBufferPointer, &params, kLaunchParamBufferSize, &params_size,
                   kLaunchParamEnd};
  constexpr unsigned kThreads = 256;
  const uint64_t words = params.row_words * params.count;
  // A grid-stride kernel: enough blocks to fill any GPU, never more than there are words.
  const auto blocks = static_cast<unsigned>(
      std::clamp<uint64_t>((words + kThreads - 1) / kThreads, 1, uint64_t{1} << 16));
  const CUresult result =
      driver.LaunchKernel(kernel, blocks, 1, 1, kThreads, 1, 1, 0, stream_, nullptr, extra);
  if (result != kSuccess) {
    throw Error(ErrorCode::kDevice,
                fmt::format("{}: launching the gather of {} rows of {} bytes failed: {}",
                            context_->name(), count, field.row_bytes, driver.Describe(result)));
  }
  counters_->gathers.fetch_add(1, std::memory_order_relaxed);
  counters_->gather_bytes.fetch_add(static_cast<int64_t>(field.row_bytes * count),
                                    std::memory_order_relaxed);
}

void CudaStream::GatherRows(std::span<const GatherField> fields, std::span<const int64_t> rows) {
  if (rows.empty() || fields.empty()) return;
  CurrentContextScope scope(*context_);
  const CudaDriver& driver = context_->driver();
  context_->gather_kernels();  // loads the module before a slot is taken
  IndexSlot& slot = TakeSlot(rows.size());
  std::memcpy(slot.host, rows.data(), rows.size_bytes());
  // One copy of the indices serves every field's kernel.
  context_->Check(driver.MemcpyHtoDAsync(slot.device, slot.host, rows.size_bytes(), stream_),
                  "cuMemcpyHtoDAsync_v2 (gather indices)");
  try {
    for (const GatherField& field : fields) {
      if (field.row_bytes != 0) LaunchGather(field, slot.device, rows.size());
    }
  } catch (...) {
    // The queued copy (and earlier fields' kernels) still read the slot: it waits for them.
    try {
      slot.last_use = CudaEvent::RecordOn(context_, stream_, *counters_);
    } catch (...) {
      driver.StreamSynchronize(stream_);
    }
    throw;
  }
  slot.last_use = CudaEvent::RecordOn(context_, stream_, *counters_);
}

void CudaStream::CopyToDevice(void* dst, const void* src, size_t bytes) {
  CurrentContextScope scope(*context_);
  const CUresult result =
      context_->driver().MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, bytes, stream_);
  if (result != kSuccess) {
    throw Error(ErrorCode::kDevice,
                fmt::format("{}: cuMemcpyHtoDAsync_v2 of {} bytes failed: {}", context_->name(),
                            bytes, context_->driver().Describe(result)));
  }
  counters_->copies.fetch_add(1, std::memory_order_relaxed);
  counters_->copy_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

std::shared_ptr<DeviceEvent> CudaStream::Record() {
  return CudaEvent::RecordOn(context_, stream_, *counters_);
}

void CudaStream::Synchronize() {
  CurrentContextScope scope(*context_);
  context_->Check(context_->driver().StreamSynchronize(stream_), "cuStreamSynchronize");
}

}  // namespace gpufeed::cuda
