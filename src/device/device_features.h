// Features of one backend that one part of gpufeed uses, kept out of the public Device
// interface every backend implements: stream timing (the loader's GPU-busy measurement) and
// cross-process memory sharing (the device cache tier's CUDA IPC). A backend that has a
// feature also derives from its interface; the part that needs it asks with TimingOf / IpcOf
// and does without when the answer is null (the host device has neither).
//
// Thread-safety: as Device's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gpufeed/device.h"

namespace gpufeed {

// A reusable event that timestamps a point of a consumer's stream on the GPU's own clock:
// how the loader measures when the GPU worked and when it waited (GpuBusyTracker). Made once
// and recorded again and again, so measuring costs no allocation per batch.
// Thread-safety: one thread at a time (its owner serializes).
class TimingEvent {
 public:
  virtual ~TimingEvent() = default;
  // Records the event after everything enqueued on `stream` so far (a CUstream handle, 0
  // for the default stream). Throws Error(kDevice) when the driver refuses.
  virtual void Record(uintptr_t stream) = 0;
  // True once the stream has passed the last Record. Never blocks, never throws: an event
  // the driver reports failed counts as done (MillisecondsSince then has no answer).
  virtual bool IsDone() = 0;
  // GPU time from `earlier` to this event, in milliseconds; nullopt when the driver cannot
  // tell (either not complete, or failed). REQUIRES: `earlier` is of the same device.
  virtual std::optional<double> MillisecondsSince(TimingEvent& earlier) = 0;
};

class StreamTiming {
 public:
  virtual ~StreamTiming() = default;
  // A timing event for consumer streams; null where the driver cannot time streams (no
  // cuEventElapsedTime). Throws Error(kDevice).
  virtual std::unique_ptr<TimingEvent> NewTimingEvent() = 0;
  // True when `stream` (a consumer's CUstream, 0 for the default stream) has completed all
  // the work enqueued on it: the GPU ran out of work there. False when busy or unknown.
  // Never blocks, never throws.
  virtual bool StreamDrained(uintptr_t stream) = 0;
  // True when `stream` is capturing a CUDA graph (or its capture was invalidated), or when
  // that cannot be told: querying such a stream, or recording a timing event on it, would
  // break the user's capture. Never blocks, never throws.
  virtual bool StreamCapturing(uintptr_t stream) = 0;
};

class DeviceIpc {
 public:
  virtual ~DeviceIpc() = default;
  // Why memory of this device cannot be shared with other processes; empty when it can.
  virtual std::string IpcUnavailable() = 0;
  // The handle of the allocation at `base` (an AllocDevice result) another process opens
  // with OpenIpc. Throws Error(kDevice) with the driver's reason.
  virtual std::array<std::byte, 64> ExportIpc(void* base) = 0;
  // Maps another process's exported allocation; release it with CloseIpc (never
  // FreeDevice). `*mapped_bytes` receives the size of the mapped allocation as the driver
  // reports it (0 when it cannot say). Throws Error(kDevice) with the driver's reason
  // (exporter gone, another GPU).
  virtual void* OpenIpc(const std::array<std::byte, 64>& handle, size_t* mapped_bytes) = 0;
  virtual void CloseIpc(void* ptr) noexcept = 0;
};

// The device's feature, or null when it has none.
inline StreamTiming* TimingOf(Device& device) { return dynamic_cast<StreamTiming*>(&device); }
inline DeviceIpc* IpcOf(Device& device) { return dynamic_cast<DeviceIpc*>(&device); }

// Why `device`'s memory cannot be shared with other processes; empty when it can.
inline std::string IpcUnavailable(Device& device) {
  DeviceIpc* ipc = IpcOf(device);
  return ipc == nullptr ? "the device is not a CUDA device" : ipc->IpcUnavailable();
}

}  // namespace gpufeed
