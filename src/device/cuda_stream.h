// CudaStream and CudaEvent: RAII owners of a CUstream and a CUevent of one CudaContext.
//
// A CudaStream is created non-blocking, so it never waits on (nor holds up) the work
// PyTorch queues on the legacy default stream; the consumer orders itself after a batch
// explicitly, through the batch's CudaEvent (MakeStreamWait). Those events are made with
// DISABLE_TIMING: they only order work. A failed copy surfaces on the event after it:
// IsDone() then answers true (nothing reads the buffer any more) and Wait() throws.
// CudaTimingEvent is the one kind with timing: reused, recorded on consumer streams.
//
// GatherRows stages the row indices in one of the stream's own pinned + device index buffers, each
// reused only after the event of its last gather: the copy that read the pinned side and the kernel
// that read the device side are then done.
//
// Thread-safety: a CudaStream is for one thread at a time (the loader holds a lock around
// it). A CudaEvent is thread-safe; a CudaTimingEvent is for one thread at a time. No
// destructor throws or blocks.
#pragma once

#include <array>
#include <atomic>
#include <memory>

#include "device/cuda_context.h"
#include "device/device_features.h"
#include "gpufeed/device.h"

namespace gpufeed::cuda {

// What a CudaDevice counts over its lifetime; the benchmark reports it.
struct CudaCounters {
  std::atomic<int64_t> copies{0};
  std::atomic<int64_t> copy_bytes{0};
  std::atomic<int64_t> events{0};
  std::atomic<int64_t> gathers{0};  // gather kernels launched
  std::atomic<int64_t> gather_bytes{0};
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
  // One copy of the indices, then per field gather.cu's widest kernel that its row size and
  // addresses allow.
  using DeviceStream::GatherRows;
  void GatherRows(std::span<const GatherField> fields, std::span<const int64_t> rows) override;
  std::shared_ptr<DeviceEvent> Record() override;
  void Synchronize() override;

  CUstream handle() const { return stream_; }

 private:
  struct IndexSlot {
    int64_t* host = nullptr;  // pinned
    CUdeviceptr device = 0;
    size_t capacity = 0;                  // indices
    std::shared_ptr<CudaEvent> last_use;  // after the gather that last read it
  };
  // Each gather (a batch: all its fields) takes a slot until it completes, and a worker taking
  // a busy slot waits for it: 32 keep many batches queued ahead without host waits. Slots
  // are allocated on first use (8 KiB pinned + 8 KiB device each, more for larger batches).
  static constexpr size_t kIndexSlots = 32;

  // The next slot, free (its last gather done) and holding at least `count` indices.
  IndexSlot& TakeSlot(size_t count);
  // Enqueues one field's kernel reading `count` indices at `rows`. REQUIRES: context current.
  void LaunchGather(const GatherField& field, CUdeviceptr rows, size_t count);
  void FreeSlot(IndexSlot& slot) noexcept;

  std::shared_ptr<const CudaContext> context_;
  std::shared_ptr<CudaCounters> counters_;
  CUstream stream_ = nullptr;
  std::array<IndexSlot, kIndexSlots> slots_;
  size_t next_slot_ = 0;
};

}  // namespace gpufeed::cuda
