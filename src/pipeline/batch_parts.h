// Batch::Parts: what a delivered Batch owns behind its public face: its buffer (returned to
// its pool when the batch dies, after the consumer's stream when one was named), the device,
// the loader's count of batches the consumer holds, and its step on the GPU busy tracker.
//
// Thread-safety: belongs to its Batch (one consumer at a time; dropped on any thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "device/buffer_pool.h"
#include "gpufeed/batch.h"
#include "pipeline/measure/gpu_busy_tracker.h"

namespace gpufeed {

struct Batch::Parts {
  BufferPool::Handle buffer;
  std::shared_ptr<const Schema> schema;
  std::shared_ptr<Device> device;
  std::shared_ptr<std::atomic<int>> held;
  uintptr_t consumer_stream = 0;
  bool consumer_stream_set = false;
  std::shared_ptr<GpuBusyTracker> gpu_busy;  // times the consumer's stream
  int64_t step = -1;                         // this batch's step, for gpu_busy
};

}  // namespace gpufeed
