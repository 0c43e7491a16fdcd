// CudaStream and CudaEvent: RAII owners of a CUstream and a CUevent of one CudaContext.
//
// A CudaStream is created non-blocking, so it never waits on (nor holds up) the work
// PyTorch queues on the legacy default stream; the consumer orders itself after a batch
// explicitly, through the batch's CudaEvent (MakeStreamWait). Those events are made with
// DISABLE_TIMING: they only order work. A failed copy surfaces on the event after it:
// IsDone() then answers true (nothing reads the buffer any more) and Wait() throws.
// CudaTimingEvent is the one kind with timing: reused, recorded on consumer streams.
//
// Thread-safety: a CudaStream is for one thread at a time (the loader holds a lock around
// it). A CudaEvent is thread-safe; a CudaTimingEvent is for one thread at a time. No
// destructor throws or blocks.
#pragma once

#include <atomic>
#include <memory>

#include "device/cuda_context.h"
#include "gpufeed/device.h"

namespace gpufeed::cuda {

// What a CudaDevice counts over its lifetime; the benchmark reports it.
struct CudaCounters {
  std::atomic<int64_t> copies{0};
  std::atomic<int64_t> copy_bytes{0};
  std::atomic<int64_t> events{0};
  // Allocated over the device's life; pools allocate once, so this is their footprint.
  std::atomic<int64_t> host_bytes_allocated{0};  // pinned
  std::atomic<int64_t> device_bytes_allocated{0};
};

class CudaEvent : public DeviceEvent {
 public:
  // Records a new event on `stream` (a raw CUstream: ours or a consumer's).
  static std::shared_ptr<CudaEvent> RecordOn(std::shared_ptr<const CudaContext> context,
                                             CUstream stream, CudaCounters& counters);
  ~CudaEvent() override;

  bool IsDone() override;
  void Wait() override;
  void MakeStreamWait(uintptr_t stream) override;

 private:
  CudaEvent(std::shared_ptr<const CudaContext> context, CUevent event);
  void Fail(CUresult result);  // keeps the first failure for Wait()

  std::shared_ptr<const CudaContext> context_;
  CUevent event_;
  std::atomic<bool> done_{false};
  std::atomic<CUresult> failure_{kSuccess};
};

class CudaTimingEvent : public TimingEvent {
 public:
  // Throws Error(kDevice) when the driver cannot make an event.
  explicit CudaTimingEvent(std::shared_ptr<const CudaContext> context);
  ~CudaTimingEvent() override;

  void Record(uintptr_t stream) override;
  bool IsDone() override;
  std::optional<double> MillisecondsSince(TimingEvent& earlier) override;

 private:
  std::shared_ptr<const CudaContext> context_;
  CUevent event_ = nullptr;
};

class CudaStream : public DeviceStream {
 public:
  // Throws Error(kDevice) when the driver cannot make a stream.
  CudaStream(std::shared_ptr<const CudaContext> context, std::shared_ptr<CudaCounters> counters);
  ~CudaStream() override;

  // REQUIRES: src is pinned (AllocHost) and dst is device memory (AllocDevice).
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  std::shared_ptr<DeviceEvent> Record() override;
  void Synchronize() override;

  CUstream handle() const { return stream_; }

 private:
  std::shared_ptr<const CudaContext> context_;
  std::shared_ptr<CudaCounters> counters_;
  CUstream stream_ = nullptr;
};

}  // namespace gpufeed::cuda
