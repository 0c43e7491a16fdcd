#include "gpufeed/loader.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/buffer_pool.h"
#include "core/system_memory.h"
#include "core/thread_pool.h"
#include "gpufeed/error.h"
#include "gpufeed/sampler.h"
#include "pipeline/autotuner.h"
#include "pipeline/batch_layout.h"
#include "pipeline/gpu_busy_tracker.h"
#include "pipeline/random.h"

namespace gpufeed {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SamplerOptions ToSamplerOptions(const LoaderOptions& o, const Source& source) {
  SamplerOptions s;
  s.batch_size = o.batch_size;
  s.shuffle = o.shuffle;
  s.seed = o.seed;
  s.drop_last = o.drop_last;
  s.rank = o.rank;
  s.world_size = o.world_size;
  s.shuffle_block = o.shuffle_block < 0 ? std::max<int64_t>(1, source.PreferredBlock())
                                        : o.shuffle_block;
  s.shuffle_window = o.shuffle_window;
  return s;
}

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

LoaderOptions CheckOptions(LoaderOptions o) {
  if (o.workers < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("workers must be >= 0 (0 = automatic), got {}", o.workers));
  }
  if (o.prefetch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("prefetch must be >= 0 (0 = automatic), got {}", o.prefetch));
  }
  if (o.max_outstanding < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("max_outstanding must be >= 1, got {}", o.max_outstanding));
  }
  if (o.start_epoch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("start_epoch must be >= 0, got {}", o.start_epoch));
  }
  if (o.max_workers < 0 || o.max_prefetch < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("max_workers and max_prefetch must be >= 0 (0 = automatic), got {} "
                            "and {}",
                            o.max_workers, o.max_prefetch));
  }
  if (o.workers == 0) o.workers = std::min(4, UsableCpus());
  if (o.prefetch == 0) o.prefetch = 2 * o.workers;
  if (o.max_workers == 0) o.max_workers = o.autotune ? UsableCpus() : o.workers;
  o.max_workers = std::max(o.max_workers, o.workers);
  // max_prefetch == 0 is resolved once the batch size in bytes is known (RAM budget).
  if (!o.device) o.device = HostDevice();
  return o;
}

}  // namespace

// What a Batch owns: its buffers (returned to their pools when it dies) and the loader's
// count of batches the consumer holds.
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

Batch::Batch(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {
  schema_ = parts_->schema.get();
}

Batch::~Batch() {
  if (!parts_) return;
  if (parts_->consumer_stream_set && parts_->buffer) {
    // The consumer's kernels may still read this batch: reuse it only after them.
    try {
      parts_->buffer.ReleaseAfter(parts_->device->RecordOn(parts_->consumer_stream));
    } catch (...) {
      // Recording failed (driver shutting down); fall back to a host-side wait on the copy.
      if (ready_) {
        try {
          ready_->Wait();
        } catch (...) {
        }
      }
    }
  }
  parts_->buffer.Reset();
  parts_->held->fetch_sub(1);
}

FieldView Batch::field(int index) const {
  GPUFEED_ASSERT(index >= 0 && index < static_cast<int>(fields_.size()), "field index");
  const FieldSpec& spec = schema_->fields[static_cast<size_t>(index)];
  return FieldView{&spec, fields_[static_cast<size_t>(index)], rows_,
                   parts_->device->type(), parts_->device->ordinal()};
}

FieldView Batch::field(std::string_view name) const {
  schema_->Field(name);  // throws naming the fields
  return field(schema_->IndexOf(name));
}

void Batch::WaitOn(uintptr_t stream) const {
  if (ready_) ready_->MakeStreamWait(stream);
  parts_->consumer_stream = stream;
  parts_->consumer_stream_set = true;
  // The stream may begin this step from here: time it (after the wait, so it counts).
  if (parts_->gpu_busy) parts_->gpu_busy->MarkStart(parts_->step, stream);
}

void Batch::Synchronize() const {
  if (ready_) ready_->Wait();
}

class Loader::Impl {
 public:
  Impl(std::shared_ptr<Source> source, LoaderOptions options)
      : source_(std::move(source)),
        options_(CheckOptions(std::move(options))),
        sampler_(source_ ? source_->size() : 0, ToSamplerOptions(options_, *CheckSource())),
        layout_(source_->schema(), options_.transforms, options_.batch_size),
        schema_(std::make_shared<const Schema>(layout_.output_schema())),
        device_(options_.device),
        held_(std::make_shared<std::atomic<int>>(0)),
        gpu_busy_(std::make_shared<GpuBusyTracker>(device_)),
        resident_(ResidentRowsFor(*source_, device_, options_.transforms)) {
    if (options_.max_prefetch == 0) {
      if (options_.autotune) {
        // Prefetched batches are memory: keep the deepest the tuner may go within a quarter
        // of the RAM available now.
        const uint64_t budget = HostDevice()->MemoryInfo().free_bytes / 4;
        const auto fit = static_cast<int>(std::min<uint64_t>(
            budget / std::max<size_t>(1, layout_.buffer_bytes()), 1 << 16));
        options_.max_prefetch = std::max(1, std::min(4 * options_.max_workers, fit));
      } else {
        options_.max_prefetch = options_.prefetch;
      }
    }
    options_.max_prefetch = std::max(options_.max_prefetch, options_.prefetch);
    active_workers_ = options_.workers;
    prefetch_ = options_.prefetch;
    if (options_.autotune) {
      tuner_ = std::make_unique<Autotuner>(options_.max_workers, options_.max_prefetch);
    }
    const int buffers = options_.max_workers + options_.max_prefetch + options_.max_outstanding;
    // The pools' functions own the device: a pool outlives the loader while the consumer
    // keeps a batch, and its buffers must go back to the device that made them.
    std::shared_ptr<Device> device = device_;
    if (resident_ != nullptr) {
      // Rows are gathered from device memory straight into device batches: no staging.
      batch_pool_ = BufferPool::Create(
          "device batches", layout_.buffer_bytes(), buffers,
          [device](size_t n) { return device->AllocDevice(n); },
          [device](void* p) { device->FreeDevice(p); });
      stream_ = device_->NewStream();
    } else if (device_->needs_copy()) {
      // Staging buffers are only held from read to copy completion.
      staging_pool_ = BufferPool::Create(
          "pinned staging", layout_.buffer_bytes(), options_.max_workers + 2,
          [device](size_t n) { return device->AllocHost(n); },
          [device](void* p) { device->FreeHost(p); });
      batch_pool_ = BufferPool::Create(
          "device batches", layout_.buffer_bytes(), buffers,
          [device](size_t n) { return device->AllocDevice(n); },
          [device](void* p) { device->FreeDevice(p); });
      stream_ = device_->NewStream();
    } else {
      batch_pool_ = BufferPool::Create(
          "host batches", layout_.buffer_bytes(), buffers,
          [device](size_t n) { return device->AllocHost(n); },
          [device](void* p) { device->FreeHost(p); });
    }
    // The working set of the starting parallelism is allocated (and its pages touched) now,
    // not while the first epoch runs: first-touch faults cost 2-60 ms per 8 MB buffer
    // (measured on this project's VMs after an idle spell), which stalled workers for most
    // of a short first epoch. Buffers the autotuner may add later stay lazy.
    batch_pool_->Reserve(options_.workers + options_.prefetch);
    if (staging_pool_) staging_pool_->Reserve(options_.workers + 2);
    worker_states_.resize(static_cast<size_t>(options_.max_workers));
    for (auto& state : worker_states_) state = source_->NewWorkerState();
    consumer_epoch_ = options_.start_epoch;
    Start(options_.start_epoch, 0);
  }

  ~Impl() { Stop(); }

  std::unique_ptr<Batch> Next() {
    const int64_t called = NowNs();
    if (last_return_ns_ != 0) {
      consumer_step_ns_.fetch_add(called - last_return_ns_, std::memory_order_relaxed);
    } else {
      std::lock_guard lock(mu_);  // stats() reads it under mu_ from any thread
      wall_start_ns_ = called;
    }
    // The step ends here: all its GPU work is queued before this call.
    const bool drained = gpu_busy_->EndStep();
    if (pending_timing_) pending_timing_->gpu_drained = drained;
    FinishPendingTiming(called);
    HarvestGpuFigures();
    std::unique_ptr<Batch> batch;
    {
      std::unique_lock lock(mu_);
      if (error_) std::rethrow_exception(error_);
      if (consumer_batch_ >= sampler_.batches_per_epoch()) {
        // End of the epoch: report it once; the next call goes on with the next epoch,
        // whose first batches the workers may have built already.
        ++consumer_epoch_;
        consumer_batch_ = 0;
        gpu_busy_->BeginStep(-1, -1);  // the loop's work between epochs is no wait for data
        last_return_ns_ = NowNs();
        return nullptr;
      }
      // Only a call that hands out a batch needs a free buffer: the end of an epoch does not.
      const int held = held_->load();
      if (held >= options_.max_outstanding) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{} batches are still referenced; release them or raise "
                                "max_outstanding (now {})",
                                held, options_.max_outstanding));
      }
      ready_cv_.wait(lock, [&] { return error_ || ready_.count(next_deliver_) > 0; });
      if (error_) std::rethrow_exception(error_);
      auto node = ready_.extract(next_deliver_);
      ReadyBatch& ready = node.mapped();
      ++next_deliver_;
      ++consumer_batch_;
      work_cv_.notify_all();
      const int64_t now = NowNs();
      queue_wait_ns_.fetch_add(std::max<int64_t>(0, called - ready.ready_ns),
                               std::memory_order_relaxed);
      if (first_batch_ns_ == 0) first_batch_ns_ = now - run_start_ns_;
      pending_timing_ = ready.timing;
      pending_timing_->queue_wait_ns = std::max<int64_t>(0, called - ready.ready_ns);
      pending_timing_->workers = active_workers_;
      pending_timing_->prefetch = prefetch_;
      batch = MakeBatch(std::move(ready));
    }
    held_->fetch_add(1);
    batch->parts_->gpu_busy = gpu_busy_;
    batch->parts_->step = gpu_busy_->BeginStep(batch->epoch_, batch->index_);
    pending_gpu_step_ = batch->parts_->step;
    {
      std::lock_guard lock(mu_);  // stats() reads it under mu_ from any thread
      last_return_ns_ = NowNs();
    }
    consumer_wait_ns_.fetch_add(last_return_ns_ - called, std::memory_order_relaxed);
    pending_timing_->consumer_wait_ns = last_return_ns_ - called;
    delivered_batches_.fetch_add(1, std::memory_order_relaxed);
    delivered_samples_.fetch_add(batch->size(), std::memory_order_relaxed);
    int64_t bytes = 0;
    for (int i = 0; i < static_cast<int>(schema_->fields.size()); ++i) {
      bytes += static_cast<int64_t>(batch->field(i).bytes());
    }
    delivered_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return batch;
  }

  int64_t epoch() const {
    std::lock_guard lock(mu_);
    return consumer_batch_ >= sampler_.batches_per_epoch() ? consumer_epoch_ + 1 : consumer_epoch_;
  }

  void SetEpoch(int64_t epoch) {
    if (epoch < 0) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("epoch must be >= 0, got {}", epoch));
    }
    {
      std::lock_guard lock(mu_);
      const bool at_start = consumer_batch_ == 0 && consumer_epoch_ == epoch;
      const bool at_end_of_previous =
          consumer_batch_ >= sampler_.batches_per_epoch() && consumer_epoch_ + 1 == epoch;
      if (at_end_of_previous) {
        consumer_epoch_ = epoch;
        consumer_batch_ = 0;
      }
      if ((at_start || at_end_of_previous) && !error_) return;
    }
    Restart(epoch, 0);
  }

  LoaderState State() const {
    std::lock_guard lock(mu_);
    LoaderState state;
    state.epoch = consumer_epoch_;
    state.batch = consumer_batch_;
    state.seed = options_.seed;
    state.rank = sampler_.rank();
    state.world_size = sampler_.world_size();
    state.batch_size = options_.batch_size;
    return state;
  }

  void Restore(const LoaderState& state) {
    const auto mismatch = [](std::string_view what, auto saved, auto now) {
      return Error(ErrorCode::kInvalidArgument,
                   fmt::format("cannot restore loader state: it was saved with {} {}, this "
                               "loader has {}",
                               what, saved, now));
    };
    if (state.seed != options_.seed) throw mismatch("seed", state.seed, options_.seed);
    if (state.rank != sampler_.rank()) throw mismatch("rank", state.rank, sampler_.rank());
    if (state.world_size != sampler_.world_size()) {
      throw mismatch("world_size", state.world_size, sampler_.world_size());
    }
    if (state.batch_size != options_.batch_size) {
      throw mismatch("batch_size", state.batch_size, options_.batch_size);
    }
    if (state.epoch < 0 || state.batch < 0 || state.batch > sampler_.batches_per_epoch()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot restore loader state: batch {} of epoch {} is outside an "
                              "epoch of {} batches",
                              state.batch, state.epoch, sampler_.batches_per_epoch()));
    }
    Restart(state.epoch, state.batch);
  }

  const Schema& schema() const { return *schema_; }
  const LoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return sampler_; }
  const Source& source() const { return *source_; }
  const Device& device() const { return *device_; }
  int held() const { return held_->load(); }

  void SetParallelism(int workers, int prefetch) {
    {
      std::lock_guard lock(mu_);
      active_workers_ = std::clamp(workers, 1, options_.max_workers);
      prefetch_ = std::clamp(prefetch, 1, options_.max_prefetch);
    }
    work_cv_.notify_all();
  }

  int workers() const {
    std::lock_guard lock(mu_);
    return active_workers_;
  }

  int prefetch() const {
    std::lock_guard lock(mu_);
    return prefetch_;
  }

  std::vector<BatchTiming> RecentBatches(size_t n) const {
    HarvestGpuFigures();
    std::lock_guard lock(timings_mu_);
    const size_t take = std::min(n, timings_.size());
    std::vector<BatchTiming> out;
    out.reserve(take);
    for (auto it = timings_.end() - static_cast<std::ptrdiff_t>(take); it != timings_.end(); ++it) {
      BatchTiming t = it->timing;
      auto figure = gpu_figures_.find(it->gpu_step);
      if (figure != gpu_figures_.end()) {
        t.gpu_busy_ns = figure->second.first;
        t.gpu_idle_ns = figure->second.second;
      }
      out.push_back(t);
    }
    return out;
  }

  LoaderStats Stats() const {
    LoaderStats s;
    s.batches = delivered_batches_.load();
    s.samples = delivered_samples_.load();
    s.bytes = delivered_bytes_.load();
    s.read_ns = read_ns_.load();
    s.transform_ns = transform_ns_.load();
    s.copy_ns = copy_ns_.load();
    s.buffer_wait_ns = buffer_wait_ns_.load();
    s.queue_wait_ns = queue_wait_ns_.load();
    s.consumer_wait_ns = consumer_wait_ns_.load();
    s.consumer_step_ns = consumer_step_ns_.load();
    {
      std::lock_guard lock(mu_);
      s.first_batch_ns = first_batch_ns_;
      s.wall_ns = wall_start_ns_ ? last_return_ns_ - wall_start_ns_ : 0;
    }
    s.workers = workers();
    s.prefetch = prefetch();
    s.buffers = batch_pool_->capacity() + (staging_pool_ ? staging_pool_->capacity() : 0);
    s.buffers_allocated =
        batch_pool_->allocated() + (staging_pool_ ? staging_pool_->allocated() : 0);
    {
      std::lock_guard lock(timings_mu_);
      s.tuning_log = tuning_log_;
    }
    s.buffer_bytes = static_cast<int64_t>(layout_.buffer_bytes());
    s.device = device_->name();
    HarvestGpuFigures();
    const GpuBusyTotals gpu = gpu_busy_->Totals();
    s.gpu_steps = gpu.steps;
    s.gpu_busy_ns = gpu.busy_ns;
    s.gpu_idle_ns = gpu.idle_ns;
    s.gpu_drained_steps = gpu.drained_steps;
    return s;
  }

 private:
  struct ReadyBatch {
    int64_t epoch = 0;
    int64_t batch = 0;
    std::vector<int64_t> indices;
    BufferPool::Handle buffer;
    std::shared_ptr<DeviceEvent> event;
    int64_t ready_ns = 0;
    BatchTiming timing;
  };

  static constexpr size_t kTimingsKept = 4096;

  // Takes the GPU figures of completed timing events (never waits for the GPU). They come
  // steps after their batch's timing was recorded, so they wait in gpu_figures_ until
  // RecentBatches merges them in.
  void HarvestGpuFigures() const {
    gpu_busy_->Harvest([this](const GpuStepFigure& f) {
      std::lock_guard lock(timings_mu_);
      auto& slot = gpu_figures_.try_emplace(f.step, -1, -1).first->second;
      if (f.busy_ns >= 0) slot.first = f.busy_ns;
      if (f.idle_ns >= 0) slot.second = f.idle_ns;
      // Step ids only grow: the first key is the oldest figure.
      if (gpu_figures_.size() > kTimingsKept) gpu_figures_.erase(gpu_figures_.begin());
    });
  }

  // The previous batch's step ended when the consumer called Next() again: record it, and
  // let the autotuner see it.
  void FinishPendingTiming(int64_t called) {
    if (!pending_timing_) return;
    BatchTiming t = *pending_timing_;
    pending_timing_.reset();
    t.step_ns = called - last_return_ns_;
    {
      std::lock_guard lock(timings_mu_);
      if (timings_.size() == kTimingsKept) timings_.pop_front();
      timings_.push_back({t, pending_gpu_step_});
    }
    if (!tuner_) return;
    if (auto change = tuner_->Observe(t)) {
      SetParallelism(change->workers, change->prefetch);
      std::lock_guard lock(timings_mu_);
      tuning_log_.push_back(fmt::format("batch {} of epoch {}: {}", t.batch, t.epoch,
                                        change->reason));
    }
  }

  const Source* CheckSource() const {
    if (!source_) throw Error(ErrorCode::kInvalidArgument, "the loader needs a source, got null");
    return source_.get();
  }

  // Starts workers producing from batch `batch` of `epoch`. REQUIRES: no workers running.
  void Start(int64_t epoch, int64_t batch) {
    {
      std::lock_guard lock(mu_);
      run_epoch_ = epoch;
      run_batch_ = batch;
      next_claim_ = 0;
      next_deliver_ = 0;
      consumer_epoch_ = epoch;
      consumer_batch_ = batch;
      stop_ = false;
      halted_ = false;
      error_ = nullptr;
      ready_.clear();
      run_start_ns_ = NowNs();
      first_batch_ns_ = 0;
    }
    pending_timing_.reset();
    if (sampler_.batches_per_epoch() == 0) return;  // nothing to read, ever
    pool_ = std::make_unique<ThreadPool>(options_.max_workers, options_.max_workers);
    loops_.clear();
    for (int w = 0; w < options_.max_workers; ++w) {
      loops_.push_back(pool_->Submit([this](int thread_index) { WorkerLoop(thread_index); }));
    }
  }

  void Stop() noexcept {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      halted_ = true;
    }
    work_cv_.notify_all();
    ready_cv_.notify_all();
    batch_pool_->WakeAll();
    if (staging_pool_) staging_pool_->WakeAll();
    for (auto& loop : loops_) loop.wait();  // worker loops catch everything themselves
    loops_.clear();
    pool_.reset();
    if (stream_) {
      try {
        stream_->Synchronize();
      } catch (...) {
        // A failed copy was reported by its batch's worker already.
      }
    }
    std::lock_guard lock(mu_);
    ready_.clear();
  }

  void Restart(int64_t epoch, int64_t batch) {
    Stop();
    // The step open now ends at the restart, not at the next Next(): what runs in between
    // (a validation loop, a checkpoint) is neither its GPU work nor a wait for the next batch.
    gpu_busy_->DropStep();
    Start(epoch, batch);
  }

  // The epoch and batch that run sequence number `seq` stands for.
  std::pair<int64_t, int64_t> Position(int64_t seq) const {
    const int64_t per_epoch = sampler_.batches_per_epoch();
    const int64_t absolute = run_batch_ + seq;
    return {run_epoch_ + absolute / per_epoch, absolute % per_epoch};
  }

  std::shared_ptr<const std::vector<int64_t>> OrderOf(int64_t epoch) {
    std::lock_guard lock(orders_mu_);
    auto it = orders_.find(epoch);
    if (it != orders_.end()) return it->second;
    // Keep only the epochs in use: the consumer's and the one the workers run ahead into.
    while (orders_.size() >= 2) orders_.erase(orders_.begin());
    auto order = std::make_shared<const std::vector<int64_t>>(sampler_.EpochOrder(epoch));
    orders_.emplace(epoch, order);
    return order;
  }

  // Read by workers waiting inside a buffer pool, under the pool's lock: an atomic, so no
  // pool lock is ever held while taking mu_ (the error path takes mu_, then wakes the pools).
  bool Stopping() const { return halted_.load(); }

  void WorkerLoop(int worker) {
    for (;;) {
      int64_t seq;
      {
        std::unique_lock lock(mu_);
        // Workers past the active count park: the autotuner may wake them later.
        work_cv_.wait(lock, [&] {
          return stop_ || error_ ||
                 (worker < active_workers_ &&
                  next_claim_ < next_deliver_ + active_workers_ + prefetch_);
        });
        if (stop_ || error_) return;
        seq = next_claim_++;
      }
      try {
        ReadyBatch ready = Build(seq, worker);
        if (!ready.buffer) return;  // stopped while waiting for a buffer
        std::lock_guard lock(mu_);
        if (stop_) return;
        ready_.emplace(seq, std::move(ready));
        ready_cv_.notify_all();
      } catch (...) {
        {
          std::lock_guard lock(mu_);
          if (!error_ && !stop_) error_ = std::current_exception();
          halted_ = true;
        }
        ready_cv_.notify_all();
        work_cv_.notify_all();
        batch_pool_->WakeAll();
        if (staging_pool_) staging_pool_->WakeAll();
        return;
      }
    }
  }

  ReadyBatch Build(int64_t seq, int worker) {
    ReadyBatch ready;
    std::tie(ready.epoch, ready.batch) = Position(seq);
    const auto order = OrderOf(ready.epoch);
    const auto rows = sampler_.BatchOf(*order, ready.batch);
    ready.indices.assign(rows.begin(), rows.end());
    const auto stopping = [this] { return Stopping(); };
    if (resident_ != nullptr) return Gather(std::move(ready), stopping);

    int64_t t0 = NowNs();
    BufferPool::Handle host = (staging_pool_ ? staging_pool_ : batch_pool_)->Acquire(stopping);
    if (!host) return ready;
    int64_t t1 = NowNs();
    ready.timing.epoch = ready.epoch;
    ready.timing.batch = ready.batch;
    ready.timing.rows = static_cast<int64_t>(rows.size());
    if (staging_pool_) {
      // Staging buffers are held only from read to copy completion, so waiting for one is
      // waiting for earlier copies: it counts as copy time (slow copies show up here).
      ready.timing.copy_ns = t1 - t0;
      copy_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
    } else {
      ready.timing.buffer_wait_ns = t1 - t0;
      buffer_wait_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
    }

    BatchView view = layout_.View(host.data(), static_cast<int64_t>(rows.size()));
    source_->ReadSeeded(rows, view, worker_states_[static_cast<size_t>(worker)].get(),
                        MixSeed(options_.seed, static_cast<uint64_t>(ready.epoch)));
    int64_t t2 = NowNs();
    read_ns_.fetch_add(t2 - t1, std::memory_order_relaxed);
    ready.timing.read_ns = t2 - t1;

    if (!options_.transforms.empty()) {
      const uint64_t batch_seed = MixSeed(MixSeed(options_.seed, static_cast<uint64_t>(ready.epoch)),
                                          static_cast<uint64_t>(ready.batch));
      for (size_t i = 0; i < options_.transforms.size(); ++i) {
        options_.transforms[i]->Apply(layout_.stage_schema(i), view, MixSeed(batch_seed, i));
      }
      const int64_t t3 = NowNs();
      transform_ns_.fetch_add(t3 - t2, std::memory_order_relaxed);
      ready.timing.transform_ns = t3 - t2;
      t2 = t3;
    }

    if (!staging_pool_) {
      ready.buffer = std::move(host);
    } else {
      BufferPool::Handle target = batch_pool_->Acquire(stopping);
      if (!target) return ready;
      const int64_t t3 = NowNs();
      buffer_wait_ns_.fetch_add(t3 - t2, std::memory_order_relaxed);
      ready.timing.buffer_wait_ns += t3 - t2;
      {
        std::lock_guard lock(stream_mu_);
        try {
          for (const auto& region : layout_.CopyRegions(static_cast<int64_t>(rows.size()))) {
            stream_->CopyToDevice(target.data() + region.offset, host.data() + region.offset,
                                  region.bytes);
          }
        } catch (...) {
          // An earlier region's copy may still read the staging buffer: hold it until the
          // stream gets past it (best effort; the error is what matters).
          try {
            host.ReleaseAfter(stream_->Record());
          } catch (...) {
          }
          throw;
        }
        ready.event = stream_->Record();
      }
      // The staging buffer comes back once the copy that reads it is done.
      host.ReleaseAfter(ready.event);
      const int64_t issue_ns = NowNs() - t3;
      ready.timing.copy_ns += issue_ns;
      copy_ns_.fetch_add(issue_ns, std::memory_order_relaxed);
      ready.buffer = std::move(target);
    }
    ready.ready_ns = NowNs();
    return ready;
  }

  // The device tier's batch: the rows already lie in device memory, so the worker only
  // enqueues the batch's gather (its indices, a kernel per field) on the copy stream.
  // Issuing counts as copy time.
  template <typename Stopping>
  ReadyBatch Gather(ReadyBatch ready, const Stopping& stopping) {
    const auto rows = static_cast<int64_t>(ready.indices.size());
    ready.timing.epoch = ready.epoch;
    ready.timing.batch = ready.batch;
    ready.timing.rows = rows;
    const int64_t t0 = NowNs();
    BufferPool::Handle target = batch_pool_->Acquire(stopping);
    if (!target) return ready;
    const int64_t t1 = NowNs();
    ready.timing.buffer_wait_ns = t1 - t0;
    buffer_wait_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
    const BatchView view = layout_.View(target.data(), rows);
    std::vector<GatherField> fields(view.fields.size());
    for (size_t f = 0; f < fields.size(); ++f) {
      fields[f] = {view.fields[f], resident_->fields[f], schema_->fields[f].SampleBytes()};
    }
    {
      std::lock_guard lock(stream_mu_);
      try {
        stream_->GatherRows(fields, ready.indices);
      } catch (...) {
        // An earlier field's gather may still write the buffer: hold it until the stream
        // gets past it (best effort; the error is what matters).
        try {
          target.ReleaseAfter(stream_->Record());
        } catch (...) {
        }
        throw;
      }
      ready.event = stream_->Record();
    }
    const int64_t issue_ns = NowNs() - t1;
    ready.timing.copy_ns = issue_ns;
    copy_ns_.fetch_add(issue_ns, std::memory_order_relaxed);
    ready.buffer = std::move(target);
    ready.ready_ns = NowNs();
    return ready;
  }

  std::unique_ptr<Batch> MakeBatch(ReadyBatch ready) {
    auto parts = std::make_unique<Batch::Parts>();
    parts->schema = schema_;
    parts->device = device_;
    parts->held = held_;
    std::byte* base = ready.buffer.data();
    parts->buffer = std::move(ready.buffer);
    std::unique_ptr<Batch> batch(new Batch(std::move(parts)));
    batch->epoch_ = ready.epoch;
    batch->index_ = ready.batch;
    batch->rows_ = static_cast<int64_t>(ready.indices.size());
    batch->indices_ = std::move(ready.indices);
    batch->fields_ = layout_.View(base, batch->rows_).fields;
    batch->ready_ = std::move(ready.event);
    return batch;
  }

  std::shared_ptr<Source> source_;
  LoaderOptions options_;
  Sampler sampler_;
  BatchLayout layout_;
  std::shared_ptr<const Schema> schema_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<std::atomic<int>> held_;
  std::shared_ptr<GpuBusyTracker> gpu_busy_;
  // The source's rows in device_'s memory (the device cache tier): batches are gathered
  // there. Null: batches are read on the host.
  const DeviceResidentRows* resident_ = nullptr;
  std::shared_ptr<BufferPool> staging_pool_;  // only when the device needs a copy
  std::shared_ptr<BufferPool> batch_pool_;
  std::mutex stream_mu_;
  std::unique_ptr<DeviceStream> stream_;
  std::vector<std::unique_ptr<SourceWorkerState>> worker_states_;

  std::mutex orders_mu_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers: a slot opened, or stop
  std::condition_variable ready_cv_;  // consumer: a batch is ready, or an error
  bool stop_ = false;
  std::exception_ptr error_;
  std::atomic<bool> halted_{false};  // stop_ || error_, for lock-free reads
  int64_t run_epoch_ = 0;  // where the current run of workers started
  int64_t run_batch_ = 0;
  int64_t next_claim_ = 0;    // run sequence numbers
  int64_t next_deliver_ = 0;
  std::map<int64_t, ReadyBatch> ready_;
  int64_t consumer_epoch_ = 0;  // where the consumer stands
  int64_t consumer_batch_ = 0;
  int64_t run_start_ns_ = 0;
  int64_t first_batch_ns_ = 0;
  // Written by the consumer thread under mu_ (stats() reads them under it), read there
  // without it.
  int64_t wall_start_ns_ = 0;
  int64_t last_return_ns_ = 0;

  int active_workers_ = 1;  // guarded by mu_
  int prefetch_ = 1;        // guarded by mu_

  std::unique_ptr<Autotuner> tuner_;           // consumer thread only
  std::optional<BatchTiming> pending_timing_;  // consumer thread only: step not known yet
  int64_t pending_gpu_step_ = -1;              // consumer thread only: pending_timing_'s step
  mutable std::mutex timings_mu_;
  struct KeptTiming {
    BatchTiming timing;
    int64_t gpu_step = -1;  // the GpuBusyTracker step it was, to find its GPU figures
  };
  std::deque<KeptTiming> timings_;
  // GpuBusyTracker step -> (gpu_busy_ns, gpu_idle_ns), -1 where not measured yet. Keyed by
  // step, not (epoch, batch): after SetEpoch/Restore the same batch runs again.
  mutable std::map<int64_t, std::pair<int64_t, int64_t>> gpu_figures_;
  std::vector<std::string> tuning_log_;

  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::future<void>> loops_;

  std::atomic<int64_t> delivered_batches_{0};
  std::atomic<int64_t> delivered_samples_{0};
  std::atomic<int64_t> delivered_bytes_{0};
  std::atomic<int64_t> read_ns_{0};
  std::atomic<int64_t> transform_ns_{0};
  std::atomic<int64_t> copy_ns_{0};
  std::atomic<int64_t> buffer_wait_ns_{0};
  std::atomic<int64_t> queue_wait_ns_{0};
  std::atomic<int64_t> consumer_wait_ns_{0};
  std::atomic<int64_t> consumer_step_ns_{0};
};

Loader::Loader(std::shared_ptr<Source> source, LoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(source), std::move(options))) {}
Loader::~Loader() = default;
std::unique_ptr<Batch> Loader::Next() { return impl_->Next(); }
int64_t Loader::epoch() const { return impl_->epoch(); }
void Loader::SetEpoch(int64_t epoch) { impl_->SetEpoch(epoch); }
LoaderState Loader::State() const { return impl_->State(); }
void Loader::Restore(const LoaderState& state) { impl_->Restore(state); }
const Schema& Loader::schema() const { return impl_->schema(); }
const LoaderOptions& Loader::options() const { return impl_->options(); }
int64_t Loader::batches_per_epoch() const { return impl_->sampler().batches_per_epoch(); }
int64_t Loader::samples_per_epoch() const { return impl_->sampler().shard_size(); }
const Source& Loader::source() const { return impl_->source(); }
const Device& Loader::device() const { return impl_->device(); }
int Loader::held_batches() const { return impl_->held(); }
LoaderStats Loader::stats() const { return impl_->Stats(); }
std::vector<BatchTiming> Loader::RecentBatches(size_t n) const { return impl_->RecentBatches(n); }
void Loader::SetParallelism(int workers, int prefetch) { impl_->SetParallelism(workers, prefetch); }
int Loader::workers() const { return impl_->workers(); }
int Loader::prefetch() const { return impl_->prefetch(); }

}  // namespace gpufeed
