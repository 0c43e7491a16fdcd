#include "pipeline/measure/loader_metrics.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/system/proc_text.h"
#include "gpufeed/error.h"

namespace gpufeed {
LoaderMetrics::LoaderMetrics(std::shared_ptr<GpuBusyTracker> gpu_busy)
    : gpu_busy_(std::move(gpu_busy)),
      storage_read_bytes_at_start_(ProcessStorageReadBytes()),
      remote_at_start_(ProcessRemoteStats()) {}

void LoaderMetrics::AddWorkerTiming(const BatchTiming& timing) {
  read_ns_.fetch_add(timing.read_ns, std::memory_order_relaxed);
  transform_ns_.fetch_add(timing.transform_ns, std::memory_order_relaxed);
  copy_ns_.fetch_add(timing.copy_ns, std::memory_order_relaxed);
  buffer_wait_ns_.fetch_add(timing.buffer_wait_ns, std::memory_order_relaxed);
}

void LoaderMetrics::StartRun(int64_t now_ns) {
  pending_timing_.reset();
  MutexLock lock(&mu_);
  run_start_ns_ = now_ns;
  first_batch_ns_ = 0;
}

void LoaderMetrics::BeginNext(int64_t called_ns) {
  MutexLock lock(&mu_);
  if (last_return_ns_ != 0) {
    consumer_step_ns_.fetch_add(called_ns - last_return_ns_, std::memory_order_relaxed);
  } else {
    wall_start_ns_ = called_ns;
  }
}

std::optional<BatchTiming> LoaderMetrics::FinishPending(int64_t called_ns, bool drained) {
  if (!pending_timing_) return std::nullopt;
  BatchTiming t = *pending_timing_;
  pending_timing_.reset();
  t.gpu_drained = drained;
  MutexLock lock(&mu_);
  t.step_ns = called_ns - last_return_ns_;
  if (timings_.size() == kTimingsKept) timings_.pop_front();
  timings_.push_back({t, pending_gpu_step_});
  return t;
}

void LoaderMetrics::EndOfEpoch(int64_t now_ns) {
  MutexLock lock(&mu_);
  last_return_ns_ = now_ns;
}

void AttributeWait(BatchTiming& timing, const BatchStamps& stamps, int64_t called_ns,
                   int64_t ready_ns, int64_t returned_ns) {
  // The stage boundaries, made monotone (a stage a batch skipped is empty).
  const int64_t start = stamps.start_ns > 0 ? stamps.start_ns : ready_ns;
  const int64_t read_start =
      std::max(start, stamps.read_start_ns > 0
                          ? stamps.read_start_ns
                          : (stamps.copy_start_ns > 0 ? stamps.copy_start_ns : ready_ns));
  const int64_t read_end = std::max(read_start, stamps.read_end_ns);
  const int64_t transform_end = std::max(read_end, stamps.transform_end_ns);
  // Until the worker hands the batch over it is still the worker's: a worker kept off the CPU
  // between finishing and handing over holds the loop up in its last stage.
  const int64_t ready = std::max({transform_end, ready_ns, stamps.handed_ns});
  const auto overlap = [&](int64_t from, int64_t to) {
    return std::max<int64_t>(0, std::min(to, returned_ns) - std::max(from, called_ns));
  };
  timing.waited_queued_ns = overlap(INT64_MIN, start);
  timing.waited_buffer_ns = overlap(start, read_start);
  timing.waited_read_ns = overlap(read_start, read_end);
  timing.waited_transform_ns = overlap(read_end, transform_end);
  timing.waited_copy_ns = overlap(transform_end, ready);
  timing.waited_handoff_ns = overlap(ready, INT64_MAX);
  if (stamps.staging) {  // waiting for a staging buffer is waiting for earlier copies
    timing.waited_copy_ns += timing.waited_buffer_ns;
    timing.waited_buffer_ns = 0;
  }
  if (stamps.start_ns > 0 && stamps.handed_ns >= stamps.start_ns) {
    timing.build_wall_ns = stamps.handed_ns - stamps.start_ns;
  }
}

void LoaderMetrics::Delivered(BatchTiming timing, const BatchStamps& stamps, int64_t called_ns,
                              int64_t ready_ns, int64_t gpu_step, int64_t bytes, int workers,
                              int prefetch) {
  const int64_t queue_wait = std::max<int64_t>(0, called_ns - ready_ns);
  queue_wait_ns_.fetch_add(queue_wait, std::memory_order_relaxed);
  const int64_t now = SteadyNowNs();
  {
    MutexLock lock(&mu_);
    if (first_batch_ns_ == 0) first_batch_ns_ = now - run_start_ns_;
    last_return_ns_ = now;
  }
  timing.queue_wait_ns = queue_wait;
  timing.consumer_wait_ns = now - called_ns;
  AttributeWait(timing, stamps, called_ns, ready_ns, now);
  timing.workers = workers;
  timing.prefetch = prefetch;
  pending_timing_ = timing;
  pending_gpu_step_ = gpu_step;
  consumer_wait_ns_.fetch_add(now - called_ns, std::memory_order_relaxed);
  delivered_batches_.fetch_add(1, std::memory_order_relaxed);
  delivered_samples_.fetch_add(timing.rows, std::memory_order_relaxed);
  delivered_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void LoaderMetrics::LogTuning(std::string line) {
  MutexLock lock(&mu_);
  tuning_log_.push_back(std::move(line));
}

void LoaderMetrics::LogAction(std::string line) {
  MutexLock lock(&mu_);
  actions_.push_back(std::move(line));
}

void LoaderMetrics::HarvestGpuFigures() const {
  gpu_busy_->Harvest([this](const GpuStepFigure& f) {
    MutexLock lock(&mu_);
    auto& slot = gpu_figures_.try_emplace(f.step, -1, -1).first->second;
    if (f.busy_ns >= 0) slot.first = f.busy_ns;
    if (f.idle_ns >= 0) slot.second = f.idle_ns;
    // Step ids only grow: the first key is the oldest figure.
    if (gpu_figures_.size() > kTimingsKept) gpu_figures_.erase(gpu_figures_.begin());
  });
}

std::vector<BatchTiming> LoaderMetrics::Recent(size_t n) const {
  HarvestGpuFigures();
  MutexLock lock(&mu_);
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

LoaderStats LoaderMetrics::Stats() const {
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
    MutexLock lock(&mu_);
    s.first_batch_ns = first_batch_ns_;
    s.wall_ns = wall_start_ns_ ? last_return_ns_ - wall_start_ns_ : 0;
    s.tuning_log = tuning_log_;
    s.actions = actions_;
  }
  HarvestGpuFigures();
  const GpuBusyTotals gpu = gpu_busy_->Totals();
  s.gpu_steps = gpu.steps;
  s.gpu_busy_ns = gpu.busy_ns;
  s.gpu_idle_ns = gpu.idle_ns;
  s.gpu_drained_steps = gpu.drained_steps;
  if (storage_read_bytes_at_start_) {
    if (const auto now = ProcessStorageReadBytes(); now && *now >= *storage_read_bytes_at_start_) {
      s.storage_read_bytes = static_cast<int64_t>(*now - *storage_read_bytes_at_start_);
    }
  }
  s.remote = ProcessRemoteStats();
  s.remote.requests -= remote_at_start_.requests;
  s.remote.retries -= remote_at_start_.retries;
  s.remote.throttled -= remote_at_start_.throttled;
  s.remote.failed -= remote_at_start_.failed;
  s.remote.listings -= remote_at_start_.listings;
  s.remote.bytes -= remote_at_start_.bytes;
  return s;
}

double LoaderStats::ConsumerWaitFraction() const {
  const int64_t total = consumer_wait_ns + consumer_step_ns;
  return total > 0 ? static_cast<double>(consumer_wait_ns) / static_cast<double>(total) : 0.0;
}

double LoaderStats::GpuBusyFraction() const {
  const int64_t total = gpu_busy_ns + gpu_idle_ns;
  if (gpu_steps == 0 || total <= 0) return -1;
  return static_cast<double>(gpu_busy_ns) / static_cast<double>(total);
}

std::string LoaderStats::ToJson() const {
  const auto seconds = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
  nlohmann::json j = {
      {"batches", batches},
      {"samples", samples},
      {"bytes", bytes},
      {"read_s", seconds(read_ns)},
      {"transform_s", seconds(transform_ns)},
      {"copy_s", seconds(copy_ns)},
      {"buffer_wait_s", seconds(buffer_wait_ns)},
      {"queue_wait_s", seconds(queue_wait_ns)},
      {"consumer_wait_s", seconds(consumer_wait_ns)},
      {"consumer_step_s", seconds(consumer_step_ns)},
      {"first_batch_s", seconds(first_batch_ns)},
      {"wall_s", seconds(wall_ns)},
      {"consumer_wait_fraction", ConsumerWaitFraction()},
      {"workers", workers},
      {"prefetch", prefetch},
      {"buffers", buffers},
      {"buffers_allocated", buffers_allocated},
      {"tuning_log", tuning_log},
      {"actions", actions},
      {"buffer_bytes", buffer_bytes},
      {"device", device},
      {"gpu_event_steps", gpu_steps},
      {"gpu_busy_s", seconds(gpu_busy_ns)},
      {"gpu_idle_s", seconds(gpu_idle_ns)},
      {"gpu_drained_steps", gpu_drained_steps},
  };
  // null, not a number, when nothing was measured: no stream was named, or the measured steps
  // add up to no time at all.
  const double gpu_busy = GpuBusyFraction();
  j["gpu_busy_fraction"] = gpu_busy >= 0 ? nlohmann::json(gpu_busy) : nlohmann::json();
  j["storage_read_bytes"] =
      storage_read_bytes >= 0 ? nlohmann::json(storage_read_bytes) : nlohmann::json();
  nlohmann::json from_source = {{"cache_tier", CacheTierName(source.cache_tier)}};
  if (source.cache_built_fraction >= 0) {
    from_source["cache_built_fraction"] = source.cache_built_fraction;
  }
  if (source.chunks_decoded >= 0) {
    from_source["chunks_decoded"] = source.chunks_decoded;
    from_source["chunk_cache_hits"] = source.chunk_cache_hits;
    from_source["chunk_cache_bytes"] = source.chunk_cache_bytes;
  }
  if (source.varlen_items >= 0) {
    const int64_t all = source.varlen_items + source.varlen_pad_items;
    from_source["varlen_items"] = source.varlen_items;
    from_source["varlen_pad_items"] = source.varlen_pad_items;
    from_source["varlen_truncated_items"] = source.varlen_truncated_items;
    from_source["varlen_padding_share"] =
        all > 0 ? static_cast<double>(source.varlen_pad_items) / static_cast<double>(all) : 0.0;
  }
  j["source"] = std::move(from_source);
  if (remote.requests > 0) {
    j["remote"] = {{"requests", remote.requests},
                   {"retries", remote.retries},
                   {"throttled", remote.throttled},
                   {"failed", remote.failed},
                   {"listings", remote.listings},
                   {"bytes", remote.bytes},
                   {"latency_mean_s", remote.latency_mean_s},
                   {"latency_p99_s", remote.latency_p99_s},
                   {"max_in_flight", remote.max_in_flight},
                   {"max_requests", remote.max_requests}};
  }
  return j.dump();
}

std::string LoaderState::ToJson() const {
  nlohmann::json j = {{"version", version}, {"epoch", epoch},
                      {"batch", batch},     {"seed", seed},
                      {"rank", rank},       {"world_size", world_size},
                      {"batch_size", batch_size}};
  if (samples) j["samples"] = *samples;
  if (schema) j["schema"] = *schema;
  if (shuffle) j["shuffle"] = *shuffle;
  if (drop_last) j["drop_last"] = *drop_last;
  if (pad) j["pad"] = *pad;
  if (data) j["data"] = *data;
  if (global_consumed) j["global_consumed"] = *global_consumed;
  if (plan_start) j["plan_start"] = *plan_start;
  return j.dump();
}

LoaderState LoaderState::FromJson(std::string_view json) {
  try {
    const auto j = nlohmann::json::parse(json);
    LoaderState s;
    s.version = j.contains("version") ? j.at("version").get<int>() : 1;
    if (s.version < 1 || s.version > kVersion) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("a loader state of format version {}, which this gpufeed does not "
                              "read (it reads versions 1 to {}): resume it with the gpufeed that "
                              "saved it",
                              s.version, kVersion));
    }
    s.epoch = j.at("epoch").get<int64_t>();
    s.batch = j.at("batch").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.rank = j.at("rank").get<int>();
    s.world_size = j.at("world_size").get<int>();
    s.batch_size = j.at("batch_size").get<int64_t>();
    if (j.contains("samples")) s.samples = j.at("samples").get<int64_t>();
    if (j.contains("schema")) s.schema = j.at("schema").get<std::string>();
    if (j.contains("shuffle")) s.shuffle = j.at("shuffle").get<std::string>();
    if (j.contains("drop_last")) s.drop_last = j.at("drop_last").get<bool>();
    if (j.contains("pad")) s.pad = j.at("pad").get<bool>();
    if (j.contains("data")) s.data = j.at("data").get<std::string>();
    if (j.contains("global_consumed")) s.global_consumed = j.at("global_consumed").get<int64_t>();
    if (j.contains("plan_start")) s.plan_start = j.at("plan_start").get<int64_t>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("malformed loader state: ") + e.what() +
                    " (expected {\"epoch\", \"batch\", \"seed\", \"rank\", \"world_size\", "
                    "\"batch_size\"})");
  }
}

}  // namespace gpufeed
