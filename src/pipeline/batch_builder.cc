#include "pipeline/batch_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "core/format.h"
#include "core/nvtx.h"
#include "gpufeed/error.h"
#include "pipeline/batch_parts.h"
#include "pipeline/random.h"

namespace gpufeed {
namespace {

// The source's device-resident rows when they lie on the loader's device, else null (a
// source resident elsewhere is read through Read like any other). Host transforms cannot run
// on rows that never reach the host: that is an error, not a silent slow path.
const DeviceResidentRows* ResidentRowsFor(
    const Source& source, const std::shared_ptr<Device>& device,
    const std::vector<std::shared_ptr<Transform>>& transforms) {
  const DeviceResidentRows* rows = source.device_rows();
  if (rows == nullptr || rows->device == nullptr || !SameDevice(*rows->device, *device) ||
      !device->needs_copy()) {
    return nullptr;
  }
  GPUFEED_ASSERT(rows->fields.size() == source.schema().fields.size(), "one array per field");
  if (!transforms.empty()) {
    std::string names;
    for (const auto& t : transforms) names += (names.empty() ? "" : ", ") + t->name();
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} is resident on {} and its batches are gathered there, but the "
                            "loader's transforms ({}) run on the host: give them to the cache "
                            "(CacheOptions::transforms applies deterministic ones before the "
                            "upload) or use another cache tier",
                            source.Describe(), device->name(), names));
  }
  return rows;
}

}  // namespace

BatchBuilder::BatchBuilder(std::shared_ptr<Source> source, std::shared_ptr<Device> device,
                           std::vector<std::shared_ptr<Transform>> transforms, uint64_t seed,
                           int64_t batch_size)
    : source_(std::move(source)),
      device_(std::move(device)),
      transforms_(std::move(transforms)),
      seed_(seed),
      batch_rows_(batch_size),
      layout_(source_->schema(), transforms_, batch_size),
      schema_(std::make_shared<const Schema>(layout_.output_schema())),
      resident_(ResidentRowsFor(*source_, device_, transforms_)) {}

void BatchBuilder::Prepare(const Capacity& capacity) {
  CheckBufferFitsInRam();
  // The pools' functions own the device: a pool outlives the loader while the consumer
  // keeps a batch, and its buffers must go back to the device that made them.
  std::shared_ptr<Device> device = device_;
  const size_t bytes = layout_.buffer_bytes();
  if (resident_ != nullptr || device_->needs_copy()) {
    if (resident_ == nullptr) {
      // Staging buffers are only held from read to copy completion. With resident rows there
      // are none: rows are gathered from device memory straight into device batches.
      staging_pool_ = BufferPool::Create(
          "pinned staging", bytes, capacity.staging_buffers,
          [device](size_t n) { return device->AllocHost(n); },
          [device](void* p) { device->FreeHost(p); });
    }
    batch_pool_ = BufferPool::Create(
        "device batches", bytes, capacity.batch_buffers,
        [device](size_t n) { return device->AllocDevice(n); },
        [device](void* p) { device->FreeDevice(p); });
    MutexLock lock(&stream_mu_);
    stream_ = device_->NewStream();
  } else {
    batch_pool_ = BufferPool::Create(
        "host batches", bytes, capacity.batch_buffers,
        [device](size_t n) { return device->AllocHost(n); },
        [device](void* p) { device->FreeHost(p); });
  }
  // What the loader reserves is allocated (and its pages touched) now, so running out of
  // memory is reported by the constructor; the rest is allocated by workers as they go.
  batch_pool_->Reserve(capacity.reserve_batches);
  if (staging_pool_) staging_pool_->Reserve(capacity.reserve_staging);
  worker_states_.resize(static_cast<size_t>(capacity.workers));
  for (auto& state : worker_states_) state = source_->NewWorkerState();
}

// Host batch buffers (and pinned staging buffers, as large) live in RAM, with the batch's
// sample indices: a batch larger than the machine's RAM can never be had, and on an
// overcommitting kernel its allocation would succeed and then be killed while its pages are
// touched. Say so, with the sizes, instead.
void BatchBuilder::CheckBufferFitsInRam() const {
  const uint64_t ram = HostDevice()->MemoryInfo().total_bytes;
  const uint64_t rows = static_cast<uint64_t>(batch_rows_);
  const uint64_t index_bytes = rows * sizeof(int64_t);  // rows <= the source's sample count
  // Batches gathered on the device hold only their indices in RAM.
  const uint64_t buffer = resident_ != nullptr ? 0 : layout_.buffer_bytes();
  const uint64_t bytes = buffer > UINT64_MAX - index_bytes ? UINT64_MAX : buffer + index_bytes;
  if (ram == 0 || bytes <= ram) return;
  const uint64_t per_row = (resident_ != nullptr ? 0 : layout_.row_bytes()) + sizeof(int64_t);
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("a batch of {} samples needs {} ({} bytes) of RAM: {} per sample for its "
                          "fields and 8 B for its index, more than this machine's {}. Lower "
                          "batch_size: about {} samples fit, and the loader keeps several "
                          "batches in flight",
                          rows, FormatBytes(static_cast<double>(bytes)), bytes,
                          FormatBytes(static_cast<double>(per_row - sizeof(int64_t))),
                          FormatBytes(static_cast<double>(ram)), ram / per_row));
}

BuiltBatch BatchBuilder::Build(int64_t epoch, int64_t batch, std::span<const int64_t> indices,
                               int worker, const std::function<bool()>& stopping,
                               std::span<const std::vector<int64_t>> ahead) {
  BuiltBatch built;
  built.epoch = epoch;
  built.batch = batch;
  built.indices.assign(indices.begin(), indices.end());
  built.timing.epoch = epoch;
  built.timing.batch = batch;
  built.timing.rows = static_cast<int64_t>(indices.size());
  built.stamps.worker = worker;
  // Nsight's view of the batch: its stages nest inside one range per batch.
  std::string range_name;
  if (NvtxEnabled()) range_name = fmt::format("gpufeed.batch {}:{}", epoch, batch);
  NvtxRange batch_range(range_name.c_str());
  if (resident_ != nullptr) {
    Gather(built, stopping);
    return built;
  }

  const int64_t t0 = SteadyNowNs();
  built.stamps.start_ns = t0;
  built.stamps.staging = staging_pool_ != nullptr;
  BufferPool::Handle host = (staging_pool_ ? staging_pool_ : batch_pool_)->Acquire(stopping);
  if (!host) return built;
  // Staging buffers are held only from read to copy completion, so waiting for one is
  // waiting for earlier copies: it counts as copy time (slow copies show up here).
  (staging_pool_ ? built.timing.copy_ns : built.timing.buffer_wait_ns) = SteadyNowNs() - t0;
  ReadAndTransform(built, host.data(), worker, ahead);
  if (staging_pool_) {
    CopyToDevice(built, std::move(host), stopping);
    if (!built.buffer) return built;
  } else {
    built.buffer = std::move(host);
  }
  built.ready_ns = SteadyNowNs();
  return built;
}

void BatchBuilder::ReadAndTransform(BuiltBatch& built, std::byte* buffer, int worker,
                                    std::span<const std::vector<int64_t>> ahead) {
  const DecodeTally before = ThreadDecodeTally();
  const int64_t t1 = SteadyNowNs();
  BatchView view = layout_.View(buffer, built.timing.rows);
  {
    NvtxRange range("gpufeed.read");
    SourceWorkerState* state = worker_states_[static_cast<size_t>(worker)].get();
    for (const auto& later : ahead) source_->ReadAhead(later, state);
    source_->ReadSeeded(built.indices, view, state,
                        MixSeed(seed_, static_cast<uint64_t>(built.epoch)));
  }
  const int64_t t2 = SteadyNowNs();
  built.timing.read_ns = t2 - t1;
  built.stamps.read_start_ns = t1;
  built.stamps.read_end_ns = t2;
  built.stamps.transform_end_ns = t2;
  built.stamps.decode_ns = ThreadDecodeTally().ns - before.ns;
  built.stamps.decodes = ThreadDecodeTally().count - before.count;
  if (transforms_.empty()) return;
  NvtxRange range("gpufeed.transform");
  const uint64_t batch_seed = MixSeed(MixSeed(seed_, static_cast<uint64_t>(built.epoch)),
                                      static_cast<uint64_t>(built.batch));
  for (size_t i = 0; i < transforms_.size(); ++i) {
    transforms_[i]->Apply(layout_.stage_schema(i), view, MixSeed(batch_seed, i));
  }
  built.stamps.transform_end_ns = SteadyNowNs();
  built.timing.transform_ns = built.stamps.transform_end_ns - t2;
}

void BatchBuilder::CopyToDevice(BuiltBatch& built, BufferPool::Handle staging,
                                const std::function<bool()>& stopping) {
  NvtxRange range("gpufeed.copy");
  const int64_t t0 = SteadyNowNs();
  built.stamps.copy_start_ns = t0;
  BufferPool::Handle target = batch_pool_->Acquire(stopping);
  if (!target) return;
  const int64_t t1 = SteadyNowNs();
  built.timing.buffer_wait_ns += t1 - t0;
  const auto regions = layout_.CopyRegions(built.timing.rows);
  built.event = EnqueueHolding(staging, [&](DeviceStream& stream) {
    for (const auto& region : regions) {
      stream.CopyToDevice(target.data() + region.offset, staging.data() + region.offset,
                          region.bytes);
    }
  });
  // The staging buffer comes back once the copy that reads it is done.
  staging.ReleaseAfter(built.event);
  built.stamps.copy_end_ns = SteadyNowNs();
  built.timing.copy_ns += built.stamps.copy_end_ns - t1;
  built.buffer = std::move(target);
}

// The device tier's batch: the rows already lie in device memory, so the worker only
// enqueues the batch's gather (its indices, a kernel per field) on the copy stream. Issuing
// counts as copy time.
void BatchBuilder::Gather(BuiltBatch& built, const std::function<bool()>& stopping) {
  NvtxRange range("gpufeed.copy");
  const int64_t t0 = SteadyNowNs();
  built.stamps.start_ns = t0;
  BufferPool::Handle target = batch_pool_->Acquire(stopping);
  if (!target) return;
  const int64_t t1 = SteadyNowNs();
  built.timing.buffer_wait_ns = t1 - t0;
  const BatchView view = layout_.View(target.data(), built.timing.rows);
  std::vector<GatherField> fields(view.fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    fields[f] = {view.fields[f], resident_->fields[f], schema_->fields[f].SampleBytes()};
  }
  built.event = EnqueueHolding(
      target, [&](DeviceStream& stream) { stream.GatherRows(fields, built.indices); });
  built.timing.copy_ns = SteadyNowNs() - t1;
  built.stamps.copy_start_ns = t1;
  built.stamps.copy_end_ns = t1 + built.timing.copy_ns;
  built.buffer = std::move(target);
  built.ready_ns = SteadyNowNs();
}

std::shared_ptr<DeviceEvent> BatchBuilder::EnqueueHolding(
    BufferPool::Handle& hold, const std::function<void(DeviceStream&)>& enqueue) {
  MutexLock lock(&stream_mu_);
  try {
    enqueue(*stream_);
  } catch (...) {
    try {
      hold.ReleaseAfter(stream_->Record());
    } catch (...) {
    }
    throw;
  }
  return stream_->Record();
}

std::unique_ptr<Batch> BatchBuilder::MakeBatch(BuiltBatch built,
                                               std::shared_ptr<std::atomic<int>> held,
                                               std::shared_ptr<GpuBusyTracker> gpu_busy,
                                               int64_t gpu_step) {
  auto parts = std::make_unique<Batch::Parts>();
  parts->schema = schema_;
  parts->device = device_;
  parts->held = std::move(held);
  parts->gpu_busy = std::move(gpu_busy);
  parts->step = gpu_step;
  std::byte* base = built.buffer.data();
  parts->buffer = std::move(built.buffer);
  std::unique_ptr<Batch> batch(new Batch(std::move(parts)));
  batch->parts_->held->fetch_add(1);  // ~Batch gives it back
  batch->epoch_ = built.epoch;
  batch->index_ = built.batch;
  batch->rows_ = static_cast<int64_t>(built.indices.size());
  batch->indices_ = std::move(built.indices);
  batch->groups_ = std::move(built.groups);
  batch->fields_ = layout_.View(base, batch->rows_).fields;
  batch->ready_ = std::move(built.event);
  return batch;
}

void BatchBuilder::WakeAll() {
  batch_pool_->WakeAll();
  if (staging_pool_) staging_pool_->WakeAll();
}

void BatchBuilder::GrowBatchBuffers(int more) { batch_pool_->Grow(more); }

int BatchBuilder::batch_buffers() const { return batch_pool_->capacity(); }

void BatchBuilder::SynchronizeStream() noexcept {
  MutexLock lock(&stream_mu_);
  if (!stream_) return;
  try {
    stream_->Synchronize();
  } catch (...) {
    // A failed copy was reported by its batch's worker already.
  }
}

int BatchBuilder::buffers() const {
  return batch_pool_->capacity() + (staging_pool_ ? staging_pool_->capacity() : 0);
}

int BatchBuilder::buffers_free() const { return batch_pool_->capacity() - batch_pool_->in_use(); }

int BatchBuilder::buffers_allocated() const {
  return batch_pool_->allocated() + (staging_pool_ ? staging_pool_->allocated() : 0);
}

}  // namespace gpufeed
