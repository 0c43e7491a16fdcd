// Device: where batches end up. One virtual backend interface (c10's Device/Stream habit):
// HostDevice (no GPU: batches stay in host memory) and CudaDevice (pinned host staging,
// device memory, a copy stream, an event per batch). Tests implement it with fakes.
//
// Thread-safety: Device is thread-safe. A DeviceStream is used by one thread at a time
// unless its backend says otherwise; DeviceEvent is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gpufeed/error.h"

namespace gpufeed {

enum class DeviceType { kCpu, kCuda };
std::string_view DeviceTypeName(DeviceType type);  // "cpu", "cuda"

// Which device: its type and ordinal, as a value. The one place a device is spelled as text
// ("cpu", "cuda:0") and read back from it. The CPU's ordinal is always 0.
struct DeviceId {
  DeviceType type = DeviceType::kCpu;
  int ordinal = 0;

  static DeviceId Cpu() { return {}; }
  static DeviceId Cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  // "cpu", "cuda:N".
  std::string ToString() const;
  // "cpu" or "cuda:N" (N >= 0); nullopt for anything else (the caller names what it accepts).
  static std::optional<DeviceId> Parse(std::string_view text);
  friend bool operator==(const DeviceId&, const DeviceId&) = default;
};

// Something that completes later: a copy's event. The buffer pool holds a buffer back until
// the fence that reads it is done (see BufferPool::Handle::ReleaseAfter).
class Fence {
 public:
  virtual ~Fence() = default;
  // True once the work before the fence has completed. Never blocks.
  virtual bool IsDone() = 0;
  // Blocks until the work before the fence has completed. Throws Error(kDevice) on failure.
  virtual void Wait() = 0;
};

class DeviceEvent : public Fence {
 public:
  // Makes work submitted later to `stream` (a CUstream handle of the consumer, 0 for the
  // default stream) wait for this event without blocking the host: the DLPack
  // `__dlpack__(stream=...)` rule. A no-op on the host device.
  virtual void MakeStreamWait(uintptr_t stream) = 0;
};

// One field of a gather (DeviceStream::GatherRows): rows of `row_bytes` from the array at
// `src` into `dst`, both device memory.
struct GatherField {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t row_bytes = 0;
};

class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // Enqueues a host-to-device copy of `bytes` from pinned `src` to device `dst`.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Enqueues a gather between device buffers, the device tier's batch path: for each field,
  // row i of `dst` (rows.size() * row_bytes bytes) receives row rows[i] of the array at
  // `src`. The indices are copied to the device once on this stream and a kernel per field
  // moves the rows: no host work per row, and `rows` may be reused once the call returns. On
  // the host device, memcpy.
  // REQUIRES: dst and src are AllocDevice memory; every rows[i] is a row of each src array.
  virtual void GatherRows(std::span<const GatherField> fields, std::span<const int64_t> rows) = 0;
  // One field.
  void GatherRows(void* dst, const void* src, size_t row_bytes, std::span<const int64_t> rows) {
    const GatherField field{dst, src, row_bytes};
    GatherRows(std::span<const GatherField>(&field, 1), rows);
  }
  // Records an event after everything enqueued so far.
  virtual std::shared_ptr<DeviceEvent> Record() = 0;
  // Blocks until everything enqueued so far has completed.
  virtual void Synchronize() = 0;
};

struct DeviceMemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceType type() const = 0;
  virtual int ordinal() const = 0;
  DeviceId id() const { return {type(), type() == DeviceType::kCpu ? 0 : ordinal()}; }
  // "cpu", "cuda:0"
  virtual std::string name() const = 0;
  // False when batches can be built straight in their final memory (the host device):
  // then the loader skips the staging buffer and the copy.
  virtual bool needs_copy() const = 0;

  // Staging memory the CPU writes and the copy engine reads: page-locked on CUDA.
  // Throws Error(kDevice) naming the bytes asked for when it cannot be had.
  virtual void* AllocHost(size_t bytes) = 0;
  virtual void FreeHost(void* ptr) noexcept = 0;
  // Memory the consumer reads batches from. On the host device, the same as AllocHost.
  virtual void* AllocDevice(size_t bytes) = 0;
  virtual void FreeDevice(void* ptr) noexcept = 0;

  virtual std::unique_ptr<DeviceStream> NewStream() = 0;
  // Records an event on a consumer's stream (a CUstream handle, 0 for the default stream),
  // so a batch released while the consumer's kernels may still read it is reused only after
  // they finish. Null on the host device, where nothing runs asynchronously.
  virtual std::shared_ptr<DeviceEvent> RecordOn(uintptr_t stream) = 0;
  virtual DeviceMemoryInfo MemoryInfo() = 0;

  // Readies what DeviceStream::GatherRows needs (on CUDA: the gather kernels, JIT-compiled
  // by the driver from gpufeed's PTX), so a device that cannot run them says so before a
  // data set is uploaded to it. Throws Error(kDevice). Nothing to do on the host.
  virtual void PrepareGather() {}
  // Features of one backend that one part uses (stream timing, CUDA IPC) are not part of
  // this interface: src/device/device_features.h.
};

// Whether two Device objects are the same device: the same object, or CUDA devices of the
// same ordinal (they share its primary context, so memory from one is valid on the other).
bool SameDevice(const Device& a, const Device& b);

// The host device: 64-byte aligned heap memory, copies are memcpy, events are done at once.
std::shared_ptr<Device> HostDevice();

// Opens a device by spec: "cpu", "auto" (CUDA when a driver and a GPU are there, else the
// host with a one-line notice on stderr), "cuda" (ordinal LOCAL_RANK, else 0) or "cuda:N".
// Throws Error(kInvalidArgument) for a bad spec and Error(kDevice) when CUDA is asked for
// and cannot be had, saying which library was tried and why it failed.
std::shared_ptr<Device> OpenDevice(const std::string& spec);

}  // namespace gpufeed
