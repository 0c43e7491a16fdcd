#include "device/cuda_stream.h"

#include <fmt/format.h>

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
  // Returns at once; copies still queued complete and their events still fire.
  try {
    CurrentContextScope scope(*context_);
    context_->driver().StreamDestroy(stream_);
  } catch (...) {
  }
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
