// CudaDevice: the CUDA backend of Device. Batches are built in pinned host memory
// (cuMemHostAlloc), copied on a non-blocking stream of their own into device memory
// (cuMemAlloc_v2) while the previous step computes, and handed over with an event the
// consumer's stream waits on. Everything runs in the device's primary context, shared
// with PyTorch, made current around each driver call on whatever thread makes it.
//
// Open one with OpenCudaDevice (or OpenDevice("cuda:N")); the driver is found at run time
// (see CudaDriver), so a build without CUDA still links and runs.
//
// Thread-safety: thread-safe. Streams it makes are for one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "device/cuda_context.h"
#include "device/cuda_stream.h"
#include "device/device_features.h"
#include "gpufeed/device.h"

namespace gpufeed::cuda {

struct CudaDeviceOptions {
  int ordinal = -1;     // Default: -1 = $LOCAL_RANK, else 0
  std::string library;  // Default: empty = $GPUFEED_CUDA_LIBRARY, else "libcuda.so.1"
};

// Snapshot of a CudaDevice's counters.
struct CudaDeviceStats {
  int64_t copies = 0;  // host-to-device copies enqueued
  int64_t copy_bytes = 0;
  int64_t events = 0;   // events recorded
  int64_t gathers = 0;  // gather kernels launched (the device tier)
  int64_t gather_bytes = 0;
  int64_t host_bytes_allocated = 0;    // pinned buffers taken (PinnedHostPool), over its life
  int64_t device_bytes_allocated = 0;  // over the device's life
};

class CudaDevice : public Device, public StreamTiming, public DeviceIpc {
 public:
  explicit CudaDevice(std::shared_ptr<const CudaContext> context);
  ~CudaDevice() override;

  DeviceType type() const override { return DeviceType::kCuda; }
  int ordinal() const override { return context_->ordinal(); }
  std::string name() const override { return context_->name(); }
  bool needs_copy() const override { return true; }

  void* AllocHost(size_t bytes) override;
  void FreeHost(void* ptr) noexcept override;
  void* AllocDevice(size_t bytes) override;
  void FreeDevice(void* ptr) noexcept override;

  std::unique_ptr<DeviceStream> NewStream() override;
  std::shared_ptr<DeviceEvent> RecordOn(uintptr_t stream) override;
  DeviceMemoryInfo MemoryInfo() override;
  // Null when the driver lacks cuEventElapsedTime.
  std::unique_ptr<TimingEvent> NewTimingEvent() override;
  bool StreamDrained(uintptr_t stream) override;
  void PrepareGather() override;
  bool StreamCapturing(uintptr_t stream) override;
  // CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle_v2 / cuIpcCloseMemHandle).
  std::string IpcUnavailable() override;
  std::array<std::byte, 64> ExportIpc(void* base) override;
  void* OpenIpc(const std::array<std::byte, 64>& handle, size_t* mapped_bytes) override;
  void CloseIpc(void* ptr) noexcept override;

  // The GPU's product name ("NVIDIA H100 80GB HBM3").
  std::string product_name() const;
  const CudaDriver& driver() const { return context_->driver(); }
  const std::shared_ptr<const CudaContext>& context() const { return context_; }
  CudaDeviceStats stats() const;

 private:
  std::shared_ptr<const CudaContext> context_;
  std::shared_ptr<CudaCounters> counters_;
};

// Loads the driver, initializes it and retains device `ordinal`'s primary context. Throws
// Error(kDevice) naming the library tried and why CUDA cannot be had (no library, a stub
// library, no GPU visible, an ordinal the driver does not have), and
// Error(kInvalidArgument) when $LOCAL_RANK is not a number.
std::shared_ptr<CudaDevice> OpenCudaDevice(const CudaDeviceOptions& options = {});

}  // namespace gpufeed::cuda
