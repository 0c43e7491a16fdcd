// Loader::Impl wires the loader's parts together: the Sampler plans the batches, workers on
// one ThreadPool claim run sequence numbers from the ReorderQueue and have the BatchBuilder
// build them, Next() takes them back in order and wraps them as Batches, and LoaderMetrics
// and the Autotuner watch. Each part has its own file and thread-safety contract.
#include "gpufeed/loader.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>

#include "core/clock.h"
#include "core/format.h"
#include "core/log.h"
#include "core/nvtx.h"
#include "core/system/schedstat.h"
#include "core/system/system_memory.h"
#include "core/thread_annotations.h"
#include "core/thread_pool.h"
#include "gpufeed/error.h"
#include "pipeline/batch_builder.h"
#include "pipeline/groups/group_packer.h"
#include "pipeline/groups/group_source.h"
#include "pipeline/loader_checks.h"
#include "pipeline/loader_state.h"
#include "pipeline/measure/autotuner.h"
#include "pipeline/measure/gpu_busy_tracker.h"
#include "pipeline/measure/loader_metrics.h"
#include "pipeline/measure/trace_recorder.h"
#include "pipeline/memory_fit.h"
#include "pipeline/reorder_queue.h"
#include "pipeline/sampler.h"

namespace gpufeed {
class Loader::Impl {
 public:
  Impl(std::shared_ptr<Source> source, LoaderOptions options)
      : source_(WithGroupIds(std::move(source), options.groups)),
        chosen_{options.workers != 0 || options.max_workers != 0, options.prefetch != 0},
        options_(CheckOptions(std::move(options))),
        sampler_(source_ ? source_->size() : 0, ToSamplerOptions(options_, CheckSource(source_))),
        // Buffers hold the largest batch an epoch can give this rank, not batch_size rows: a
        // batch_size beyond the data set's length must not allocate for samples never read.
        builder_(source_, options_.device, options_.transforms, options_.seed,
                 std::max<int64_t>(1, std::min(options_.batch_size, sampler_.shard_size()))),
        gpu_busy_(std::make_shared<GpuBusyTracker>(options_.device)),
        metrics_(gpu_busy_),
        queue_(options_.workers, options_.prefetch) {
    if (options_.trace_batches >= 0) {
      trace_ = std::make_unique<TraceRecorder>(options_.trace_batches);
    }
    if (!chosen_.prefetch) {
      options_.prefetch =
          DefaultPrefetch(options_.workers, builder_.buffer_bytes(), options_.max_prefetch);
    }
    ResolveMaxPrefetch(options_, builder_.buffer_bytes());
    builder_.CheckBufferFitsInRam();  // one buffer past RAM: that error, sizes and all
    const MemoryRoom room = MemoryRoom::Now();
    FitBuffersInMemory(options_, chosen_,
                       {builder_.buffer_bytes(), builder_.layout().row_bytes(),
                        builder_.batch_rows(), &builder_.schema(), !options_.device->needs_copy()},
                       room);
    queue_.SetWindow(options_.workers, options_.prefetch);
    if (options_.autotune) {
      tuner_ = std::make_unique<Autotuner>(options_.max_workers, options_.max_prefetch);
    }
    BatchBuilder::Capacity capacity;
    capacity.workers = options_.max_workers;
    capacity.batch_buffers =
        options_.max_workers + options_.max_prefetch + options_.max_outstanding;
    // On the host only the first batch's buffer is made here (none past kEagerHostBuffer:
    // the open does no work in proportion to a batch of huge rows); workers fault in the rest
    // (from the process-wide pool, faulted already when an earlier loader left them) as they
    // need them, off the consumer's path: at batch 8192 the whole working set took most of a
    // second. A GPU's working set is allocated up front, so running out of device memory is
    // the constructor's error.
    const bool gpu = options_.device->needs_copy();
    const int host_first = builder_.buffer_bytes() <= kEagerHostBuffer ? 1 : 0;
    capacity.reserve_batches = gpu ? options_.workers + options_.prefetch : host_first;
    capacity.staging_buffers = options_.max_workers + 2;
    capacity.reserve_staging = options_.workers + 2;
    builder_.Prepare(capacity);
    held_limit_ = options_.max_outstanding;
    AdviseOnShuffle(*source_, sampler_);
    held_budget_bytes_ = HeldBudgetBytes(options_, builder_.buffer_bytes(), capacity.batch_buffers,
                                         room.allocatable);
    Start(options_.start_epoch, 0);
  }

  ~Impl() {
    Stop();
    if (!options_.trace.empty() && trace_) {
      try {
        trace_->WriteChromeTrace(options_.trace);
      } catch (const std::exception& e) {  // destructors never throw
        Log(LogLevel::kWarning, fmt::format("warning: {}", e.what()));
      }
    }
  }

  void WriteTrace(const std::string& path) const {
    if (!trace_) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot write the trace {}: the loader records none "
                              "(trace_batches = -1)",
                              path));
    }
    trace_->WriteChromeTrace(path);
  }

  // True in a child process forked after the loader was made.
  bool Forked() const { return getpid() != owner_pid_; }

  void SetStepObserver(std::function<void()> observer) { observer_ = std::move(observer); }
  void RecordAction(std::string action) { metrics_.LogAction(std::move(action)); }

  std::unique_ptr<Batch> Next() {
    CheckProcess();
    const int64_t called = SteadyNowNs();
    metrics_.BeginNext(called);
    // The step ends here: all its GPU work is queued before this call.
    const bool drained = gpu_busy_->EndStep();
    if (auto finished = metrics_.FinishPending(called, drained)) {
      Tune(*finished);
      if (observer_) observer_();
    }
    metrics_.HarvestGpuFigures();
    queue_.RethrowIfFailed();
    if (AtEndOfEpoch()) {
      // Report it once; the next call goes on with the next epoch, whose first batches the
      // workers may have built already.
      gpu_busy_->BeginStep(-1, -1);  // the loop's work between epochs is no wait for data
      metrics_.EndOfEpoch(SteadyNowNs());
      return nullptr;
    }
    // Only a call that hands out a batch needs a free buffer: the end of an epoch does not.
    const int held = held_->load();
    if (held >= held_limit_) GrowForHeld(held);
    const int64_t runqueue_before = ThreadRunqueueNs();
    BuiltBatch built = [&] {
      NvtxRange range("gpufeed.next");  // the consumer's wait, in Nsight's timeline
      return queue_.Pop();
    }();
    const int64_t runqueue_after = ThreadRunqueueNs();
    {
      MutexLock lock(&position_mu_);
      ++consumer_batch_;
    }
    BatchTiming timing = built.timing;
    if (runqueue_before >= 0 && runqueue_after >= runqueue_before) {
      timing.consumer_runqueue_ns = runqueue_after - runqueue_before;
    }
    const int64_t ready_ns = built.ready_ns;
    const BatchStamps stamps = built.stamps;
    const int64_t step = gpu_busy_->BeginStep(built.epoch, built.batch);
    std::unique_ptr<Batch> batch = builder_.MakeBatch(std::move(built), held_, gpu_busy_, step);
    int64_t bytes = 0;
    for (int i = 0; i < static_cast<int>(batch->schema().fields.size()); ++i) {
      bytes += static_cast<int64_t>(batch->field(i).bytes());
    }
    metrics_.Delivered(timing, stamps, called, ready_ns, step, bytes, queue_.workers(),
                       queue_.prefetch());
    if (trace_) {
      BatchTraceRecord record;
      record.epoch = timing.epoch;
      record.batch = timing.batch;
      record.rows = timing.rows;
      record.stamps = stamps;
      record.next_call_ns = called;
      record.queue_depth = queue_.ready();
      record.buffers_free = builder_.buffers_free();
      record.workers_active = queue_.workers();
      record.next_return_ns = SteadyNowNs();
      trace_->Record(record);
    }
    return batch;
  }

  int64_t epoch() const EXCLUDES(position_mu_) {
    MutexLock lock(&position_mu_);
    return consumer_batch_ >= orders_.Batches(consumer_epoch_) ? consumer_epoch_ + 1
                                                               : consumer_epoch_;
  }

  void SetEpoch(int64_t epoch) EXCLUDES(position_mu_) {
    CheckProcess();
    if (epoch < 0) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("epoch must be >= 0, got {}", epoch));
    }
    {
      MutexLock lock(&position_mu_);
      // At the start of a whole epoch: a resumed epoch's rest is not its first batch.
      const bool at_start =
          consumer_batch_ == 0 && consumer_epoch_ == epoch && orders_.StartOf(epoch) == 0;
      const bool at_end_of_previous =
          consumer_batch_ >= orders_.Batches(consumer_epoch_) && consumer_epoch_ + 1 == epoch;
      if (at_end_of_previous) {
        consumer_epoch_ = epoch;
        consumer_batch_ = 0;
      }
      if ((at_start || at_end_of_previous) && !queue_.failed()) return;
    }
    Restart(epoch, 0);
  }

  LoaderState State() const EXCLUDES(position_mu_) {
    int64_t epoch = 0;
    int64_t batch = 0;
    {
      MutexLock lock(&position_mu_);
      epoch = consumer_epoch_;
      batch = consumer_batch_;
    }
    return SaveState(sampler_, options_, *source_, epoch, batch, orders_.StartOf(epoch));
  }

  void Restore(const LoaderState& state) {
    CheckProcess();
    const ResumePoint at = ResumeAt(state, options_, sampler_, *source_);
    Restart(at.epoch, at.batch, at.start);
  }

  const Schema& schema() const { return builder_.schema(); }
  const LoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return sampler_; }
  const Source& source() const { return *source_; }
  const Device& device() const { return *options_.device; }
  int held() const { return held_->load(); }

  void SetParallelism(int workers, int prefetch) {
    queue_.SetWindow(std::clamp(workers, 1, options_.max_workers),
                     std::clamp(prefetch, 1, options_.max_prefetch));
  }
  int workers() const { return queue_.workers(); }
  int prefetch() const { return queue_.prefetch(); }

  std::vector<BatchTiming> RecentBatches(size_t n) const { return metrics_.Recent(n); }

  LoaderStats Stats() const {
    LoaderStats s = metrics_.Stats();
    s.workers = workers();
    s.prefetch = prefetch();
    s.buffers = builder_.buffers();
    s.buffers_allocated = builder_.buffers_allocated();
    s.buffer_bytes = static_cast<int64_t>(builder_.buffer_bytes());
    s.device = options_.device->name();
    s.source = source_->Stats();
    return s;
  }

 private:
  void CheckProcess() const {
    if (Forked()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("this loader was created in process {} and is used in process {}, "
                              "forked from it: its worker threads do not exist here. Create the "
                              "loader in the process that iterates it (in a torch DataLoader "
                              "worker: inside the worker, e.g. in worker_init_fn or the "
                              "dataset's __iter__; or use gpufeed.Loader without a DataLoader)",
                              owner_pid_, getpid()));
    }
  }

  // The consumer holds `held` batches, as many as the pool was planned for, and asks for
  // another: grow the batch pool by the buffers it lacks, within held_budget_bytes_ (one
  // warning the first time), or throw.
  void GrowForHeld(int held) {
    const int more = held + 1 - held_limit_;
    const auto buffer = static_cast<int64_t>(builder_.buffer_bytes());
    const int64_t grown = static_cast<int64_t>(builder_.batch_buffers() + more) * buffer;
    const std::string where = options_.device->needs_copy() ? options_.device->name() : "host";
    if (grown > held_budget_bytes_) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{} batches are still referenced, and one more {} batch buffer "
                              "({}) would pass the loader's budget for them ({}). Keep copies "
                              "of the fields you need instead of the batches (e.g. "
                              "batch[\"label\"].clone()), so each buffer goes back to the "
                              "pool, or raise held_budget_bytes / max_outstanding (now {})",
                              held, where, FormatBytes(static_cast<double>(buffer)),
                              FormatBytes(static_cast<double>(held_budget_bytes_)),
                              options_.max_outstanding));
    }
    builder_.GrowBatchBuffers(more);
    held_limit_ = held + 1;
    if (!warned_held_) {
      warned_held_ = true;
      Log(LogLevel::kWarning,
          fmt::format("the training loop holds {} batches (max_outstanding={}): each batch "
                      "held costs a {} batch buffer ({}), so the pool grows, up to {}. To "
                      "keep small fields (labels, metrics), keep copies instead: "
                      "batch[\"label\"].clone() lets the buffer go back to the pool",
                      held, options_.max_outstanding, where,
                      FormatBytes(static_cast<double>(buffer)),
                      FormatBytes(static_cast<double>(held_budget_bytes_))));
    }
  }

  // Moves the consumer past a finished epoch; true when it was at one.
  bool AtEndOfEpoch() EXCLUDES(position_mu_) {
    MutexLock lock(&position_mu_);
    if (consumer_batch_ < orders_.Batches(consumer_epoch_)) return false;
    ++consumer_epoch_;
    consumer_batch_ = 0;
    return true;
  }

  // Lets the autotuner see a finished step.
  void Tune(const BatchTiming& timing) {
    if (!tuner_) return;
    if (auto change = tuner_->Observe(timing)) {
      SetParallelism(change->workers, change->prefetch);
      metrics_.LogTuning(
          fmt::format("batch {} of epoch {}: {}", timing.batch, timing.epoch, change->reason));
    }
  }

  // Starts workers producing from batch `batch` of `epoch`. REQUIRES: no workers running.
  void Start(int64_t epoch, int64_t batch) EXCLUDES(position_mu_) {
    {
      MutexLock lock(&position_mu_);
      consumer_epoch_ = epoch;
      consumer_batch_ = batch;
    }
    run_epoch_ = epoch;
    run_batch_ = batch;
    run_first_batches_ = orders_.Batches(epoch);
    hinted_.Reset();
    queue_.Reset();
    metrics_.StartRun(SteadyNowNs());
    if (sampler_.batches_per_epoch() == 0) return;  // nothing to read, ever
    pool_ = std::make_unique<ThreadPool>(options_.max_workers, options_.max_workers);
    loops_.clear();
    for (int w = 0; w < options_.max_workers; ++w) {
      loops_.push_back(pool_->Submit([this](int thread_index) { WorkerLoop(thread_index); }));
    }
  }

  void Stop() noexcept {
    queue_.Close();
    builder_.WakeAll();
    for (auto& loop : loops_) loop.wait();  // worker loops catch everything themselves
    loops_.clear();
    pool_.reset();
    builder_.SynchronizeStream();
    queue_.Clear();
  }

  // `start`: epoch `epoch` deals its global order from there on (a state of another world size).
  void Restart(int64_t epoch, int64_t batch, int64_t start = 0) {
    Stop();
    orders_.SetStart(epoch, start);
    // The step open now ends at the restart, not at the next Next(): what runs in between
    // (a validation loop, a checkpoint) is neither its GPU work nor a wait for the next batch.
    gpu_busy_->DropStep();
    Start(epoch, batch);
  }

  void WorkerLoop(int worker) {
    // Read by workers waiting inside a buffer pool, under the pool's lock: lock-free, so no
    // pool lock is ever held while taking the queue's (the error path takes the queue's,
    // then wakes the pools).
    const std::function<bool()> stopping = [this] { return queue_.halted(); };
    // Workers past the active count park in Claim: the autotuner may wake them later.
    while (const std::optional<int64_t> seq = queue_.Claim(worker)) {
      try {
        const auto [epoch, batch] = Position(*seq);
        const auto order = orders_.Of(epoch);
        const int64_t runqueue_before = ThreadRunqueueNs();
        BuiltBatch built = builder_.Build(epoch, batch, sampler_.BatchOf(*order, batch), worker,
                                          stopping, Ahead(*seq, epoch, *order));
        if (!built.buffer) return;  // stopped while waiting for a buffer
        const auto groups = sampler_.GroupsOf(*order, batch);
        built.groups.assign(groups.begin(), groups.end());
        metrics_.AddWorkerTiming(built.timing);
        const int64_t runqueue_after = ThreadRunqueueNs();
        if (runqueue_before >= 0 && runqueue_after >= runqueue_before) {
          built.timing.worker_runqueue_ns = runqueue_after - runqueue_before;
        }
        built.stamps.handed_ns = SteadyNowNs();
        queue_.Put(*seq, std::move(built));
      } catch (...) {
        queue_.Fail(std::current_exception());
        builder_.WakeAll();
        return;
      }
    }
  }

  // Later batches' samples, one list each, for the source to fetch now (Source::ReadAhead).
  // The claimed batch may lie workers + prefetch batches ahead of the consumer; the hints reach
  // as far again beyond it, or as far as the source asks (within kMaxAhead), so that as
  // many fetches are out as its store serves; each batch once, by the first claim reaching it,
  // into the next epoch near an epoch's end (its plan is made now). Empty for other sources.
  std::vector<std::vector<int64_t>> Ahead(int64_t seq, int64_t epoch, const EpochPlan& order) {
    if (!reads_ahead_) return {};
    const int64_t span = queue_.workers() + queue_.prefetch();
    const int64_t asked = source_->ReadAheadSamples() / std::max<int64_t>(1, options_.batch_size);
    const auto [first, last] =
        hinted_.Take(seq, seq + span + std::max(span, std::min(asked, kMaxAhead)));
    std::vector<std::vector<int64_t>> hints;
    std::shared_ptr<const EpochPlan> next;  // the next epoch's plan, made once when needed
    for (int64_t s = first + 1; s <= last; ++s) {
      const auto [ahead_epoch, ahead_batch] = Position(s);
      if (ahead_epoch != epoch && ahead_epoch != epoch + 1) break;  // short epochs
      if (ahead_epoch != epoch && next == nullptr) next = orders_.Of(ahead_epoch);
      hints.push_back(sampler_.BatchOf(ahead_epoch == epoch ? order : *next, ahead_batch));
    }
    return hints;
  }

  // The epoch and batch that run sequence number `seq` stands for. The run's first epoch may be
  // the rest of one resumed at another world size, shorter than the ones after it.
  std::pair<int64_t, int64_t> Position(int64_t seq) const {
    const int64_t first = run_first_batches_ - run_batch_;
    if (seq < first) return {run_epoch_, run_batch_ + seq};
    const int64_t per_epoch = sampler_.batches_per_epoch();
    return {run_epoch_ + 1 + (seq - first) / per_epoch, (seq - first) % per_epoch};
  }

  const std::shared_ptr<Source> source_;
  const bool reads_ahead_ = source_ != nullptr && source_->ReadsAhead();
  HintedUpTo hinted_;
  static constexpr int64_t kMaxAhead = 256;  // batches hinted beyond the claimed one
  const ChosenCounts chosen_;  // what the caller set; DefaultPrefetch and memory decide the rest
  LoaderOptions options_;      // resolved in the constructor, then only read
  const Sampler sampler_;
  BatchBuilder builder_;
  const std::shared_ptr<std::atomic<int>> held_ = std::make_shared<std::atomic<int>>(0);
  const std::shared_ptr<GpuBusyTracker> gpu_busy_;
  LoaderMetrics metrics_;
  ReorderQueue<BuiltBatch> queue_;
  EpochOrders orders_{sampler_};
  std::unique_ptr<Autotuner> tuner_;      // consumer thread only
  std::function<void()> observer_;        // consumer thread only
  std::unique_ptr<TraceRecorder> trace_;  // null when recording is off; thread-safe
  const pid_t owner_pid_ = getpid();
  // Consumer thread only: how many held batches the pool has buffers for, the budget it may
  // grow within, and whether the growth was reported.
  int held_limit_ = 0;
  int64_t held_budget_bytes_ = 0;
  bool warned_held_ = false;

  // Where the current run of workers started: written by Start before it starts them, then
  // only read (by the workers).
  int64_t run_epoch_ = 0;
  int64_t run_batch_ = 0;
  int64_t run_first_batches_ = 0;     // batches of the run's first epoch
  std::unique_ptr<ThreadPool> pool_;  // consumer thread only, like loops_
  std::vector<std::future<void>> loops_;

  mutable Mutex position_mu_;  // where the consumer stands; epoch() reads it from any thread
  int64_t consumer_epoch_ GUARDED_BY(position_mu_) = 0;
  int64_t consumer_batch_ GUARDED_BY(position_mu_) = 0;
};

Loader::Loader(std::shared_ptr<Source> source, LoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(source), std::move(options))) {}
Loader::~Loader() {
  // In a forked child the workers were not copied and a lock may have been copied held:
  // joining or freeing could hang. Leave everything; the child's exit reclaims it.
  if (impl_ && impl_->Forked()) static_cast<void>(impl_.release());
}
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
const GroupTable* Loader::groups() const { return impl_->options().groups.get(); }
double Loader::pack_fill() const {
  const GroupPacker* packer = impl_->sampler().packer();
  return packer ? packer->fill() : 0.0;
}
int Loader::held_batches() const { return impl_->held(); }
LoaderStats Loader::stats() const { return impl_->Stats(); }
std::vector<BatchTiming> Loader::RecentBatches(size_t n) const { return impl_->RecentBatches(n); }
void Loader::WriteTrace(const std::string& path) const { impl_->WriteTrace(path); }
void Loader::SetParallelism(int workers, int prefetch) { impl_->SetParallelism(workers, prefetch); }
int Loader::workers() const { return impl_->workers(); }
int Loader::prefetch() const { return impl_->prefetch(); }
void Loader::SetStepObserver(std::function<void()> observer) {
  impl_->SetStepObserver(std::move(observer));
}
void Loader::RecordAction(std::string action) { impl_->RecordAction(std::move(action)); }

}  // namespace gpufeed
