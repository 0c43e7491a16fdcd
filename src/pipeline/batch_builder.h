// BatchBuilder: a worker's half of the loader. It owns the batch buffer pools (host batches;
// or pinned staging plus device batches; or device batches gathered from device-resident
// rows), the copy stream, and the per-worker source states, and turns one planned batch (its
// sample indices) into a BuiltBatch: read into a buffer, transformed in place, copied or
// gathered to the device with an event after it. MakeBatch wraps a built batch into the
// consumer's Batch handle.
//
// Work enqueued on the copy stream may still touch a buffer when an enqueue fails half way:
// such a buffer is held until the stream passes that point (EnqueueHolding), never reused
// early.
//
// Thread-safety: Build may run on many workers at once (each with its own `worker` index,
// one thread per index at a time); the copy stream is serialized by its own mutex. Prepare is
// called once, before any Build. MakeBatch, WakeAll and the getters may be called from any
// thread; SynchronizeStream once no worker builds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_annotations.h"
#include "device/buffer_pool.h"
#include "gpufeed/batch.h"
#include "gpufeed/loader_stats.h"
#include "gpufeed/source.h"
#include "gpufeed/transforms.h"
#include "pipeline/batch_layout.h"
#include "pipeline/measure/gpu_busy_tracker.h"
#include "pipeline/measure/trace_recorder.h"

namespace gpufeed {

// One batch a worker built, waiting to be delivered.
struct BuiltBatch {
  int64_t epoch = 0;
  int64_t batch = 0;
  std::vector<int64_t> indices;
  std::vector<BatchGroup> groups;      // packed groups: the batch's group parts
  BufferPool::Handle buffer;           // empty: the build stopped while waiting for a buffer
  std::shared_ptr<DeviceEvent> event;  // after its copy; null on the host
  int64_t ready_ns = 0;
  BatchTiming timing;  // the worker stages: read, transform, copy, buffer wait
  BatchStamps stamps;  // when each stage ran, for the trace
};

class BatchBuilder {
 public:
  struct Capacity {
    int workers = 1;          // worker indices Build is called with: [0, workers)
    int batch_buffers = 1;    // batch buffers in all
    int reserve_batches = 1;  // of those, allocated (and touched) now
    int staging_buffers = 1;  // pinned staging buffers, when the device needs a copy
    int reserve_staging = 1;
  };

  // Throws what a transform throws for the source's schema, and Error(kInvalidArgument) for
  // host transforms over rows resident on the device.
  BatchBuilder(std::shared_ptr<Source> source, std::shared_ptr<Device> device,
               std::vector<std::shared_ptr<Transform>> transforms, uint64_t seed,
               int64_t batch_size);
  BatchBuilder(const BatchBuilder&) = delete;
  BatchBuilder& operator=(const BatchBuilder&) = delete;

  // Makes the pools, the copy stream and the worker states. Throws Error(kInvalidArgument)
  // when one batch buffer would not fit in the machine's RAM (before allocating anything), and
  // what allocation throws.
  void Prepare(const Capacity& capacity);

  // Builds batch `batch` of `epoch` from samples `indices` on worker `worker`; `ahead`, the
  // samples of later batches (one list each), are the source's hints (Source::ReadAhead, once
  // per list, before the batch's own read). Returns a BuiltBatch
  // without a buffer when `stopping()` turned true while it waited for one.
  // REQUIRES: Prepare was called.
  BuiltBatch Build(int64_t epoch, int64_t batch, std::span<const int64_t> indices, int worker,
                   const std::function<bool()>& stopping,
                   std::span<const std::vector<int64_t>> ahead = {});
  // The consumer's handle on `built`, counted in `held` while it lives; `gpu_step` is its
  // step on `gpu_busy`.
  std::unique_ptr<Batch> MakeBatch(BuiltBatch built, std::shared_ptr<std::atomic<int>> held,
                                   std::shared_ptr<GpuBusyTracker> gpu_busy, int64_t gpu_step);

  // Wakes workers waiting for a buffer (to see `stopping`).
  void WakeAll();
  // Raises the batch pool's capacity by `more` buffers (the consumer holds more batches than
  // planned); the staging pool is unchanged, its buffers are held only until a copy is done.
  void GrowBatchBuffers(int more);
  int batch_buffers() const;  // the batch pool's capacity
  // Waits for everything on the copy stream; errors are dropped (each failed copy was
  // reported by its batch's worker).
  void SynchronizeStream() noexcept EXCLUDES(stream_mu_);

  const Schema& schema() const { return *schema_; }  // after transforms
  size_t buffer_bytes() const { return layout_.buffer_bytes(); }
  const BatchLayout& layout() const { return layout_; }
  int64_t batch_rows() const { return batch_rows_; }  // samples a batch buffer holds
  int buffers() const;            // in the pools
  int buffers_allocated() const;  // of those, allocated so far
  int buffers_free() const;       // batch buffers neither built into nor held by the consumer

 // Error(kInvalidArgument) with the sizes when one batch buffer exceeds the machine's RAM.
  void CheckBufferFitsInRam() const;

 private:
  void ReadAndTransform(BuiltBatch& built, std::byte* buffer, int worker,
                        std::span<const std::vector<int64_t>> ahead);
  void CopyToDevice(BuiltBatch& built, BufferPool::Handle staging,
                    const std::function<bool()>& stopping);
  void Gather(BuiltBatch& built, const std::function<bool()>& stopping);
  // Runs `enqueue` on the copy stream and returns the event after it. When `enqueue` throws,
  // what it enqueued before failing may still touch `hold`: the buffer is then released only
  // after the stream gets past it (best effort; the error is what matters), and the error
  // propagates.
  std::shared_ptr<DeviceEvent> EnqueueHolding(BufferPool::Handle& hold,
                                              const std::function<void(DeviceStream&)>& enqueue)
      EXCLUDES(stream_mu_);

  const std::shared_ptr<Source> source_;
  const std::shared_ptr<Device> device_;
  const std::vector<std::shared_ptr<Transform>> transforms_;
  const uint64_t seed_;
  const int64_t batch_rows_;  // rows a batch buffer holds
  const BatchLayout layout_;
  const std::shared_ptr<const Schema> schema_;
  // The source's rows in device_'s memory (the device cache tier): batches are gathered
  // there. Null: batches are read on the host.
  const DeviceResidentRows* const resident_;

  // Set by Prepare, then only read.
  std::shared_ptr<BufferPool> staging_pool_;  // only when the device needs a copy
  std::shared_ptr<BufferPool> batch_pool_;
  std::vector<std::unique_ptr<SourceWorkerState>> worker_states_;

  Mutex stream_mu_;
  std::unique_ptr<DeviceStream> stream_ PT_GUARDED_BY(stream_mu_);
};

}  // namespace gpufeed
