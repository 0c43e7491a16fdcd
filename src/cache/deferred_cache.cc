#include "cache/deferred_cache.h"

#include <fmt/format.h>

#include <utility>

#include "cache/open_cached.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// A worker's state for both sources: the base's from the start, the cached source's made on
// the worker's first read after the switch (one worker thread uses it at a time).
struct DeferredWorker final : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> base;
  std::unique_ptr<SourceWorkerState> cached;
  const Source* cached_for = nullptr;
};

}  // namespace

DeferredCachedSource::DeferredCachedSource(std::shared_ptr<Source> base, CacheOptions options)
    : base_(std::move(base)), options_(std::move(options)) {
  if (base_ == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, "DeferredCachedSource: source is null");
  }
  if (options_.tier == CacheTier::kAuto || options_.tier == CacheTier::kNone) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("DeferredCachedSource: no tier to copy into (\"{}\")",
                            CacheTierName(options_.tier)));
  }
  if (!base_->rows_repeat()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("DeferredCachedSource: {} gives other rows at every read; a copy "
                            "would freeze one draw",
                            base_->Describe()));
  }
}

std::string DeferredCachedSource::Start(std::string* why) const {
  std::lock_guard lock(start_mu_);
  if (started_) {
    *why = "a copy was started before";
    return {};
  }
  started_ = true;
  CacheInfo info;
  try {
    cached_owner_ = CacheInTier(base_, options_, &info);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    *why = e.what();
    return {};
  }
  cached_.store(cached_owner_.get(), std::memory_order_release);
  // "a RAM copy (0.8 GB fits the RAM budget 11.2 GB)": the reason's first clause (the rest
  // says how it fills, which the remedy's own line says).
  const std::string why_it_fits = info.reason.substr(0, info.reason.find("; "));
  return fmt::format("a {} copy ({})",
                     info.tier == CacheTier::kRam ? "RAM" : CacheTierName(info.tier), why_it_fits);
}

SourceStats DeferredCachedSource::Stats() const {
  SourceStats stats = base_->Stats();
  if (const Source* cached = cached_.load(std::memory_order_acquire)) {
    const SourceStats copy = cached->Stats();
    stats.cache_tier = copy.cache_tier;
    stats.cache_built_fraction = copy.cache_built_fraction;
  }
  return stats;
}

std::unique_ptr<SourceWorkerState> DeferredCachedSource::NewWorkerState() const {
  auto state = std::make_unique<DeferredWorker>();
  state->base = base_->NewWorkerState();
  return state;
}

void DeferredCachedSource::ReadAhead(std::span<const int64_t> indices,
                                     SourceWorkerState* state) const {
  auto* worker = static_cast<DeferredWorker*>(state);
  if (worker != nullptr && cached_.load(std::memory_order_acquire) == nullptr) {
    base_->ReadAhead(indices, worker->base.get());
  }
}

void DeferredCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                                SourceWorkerState* state) const {
  auto* worker = static_cast<DeferredWorker*>(state);
  const Source* cached = cached_.load(std::memory_order_acquire);
  if (cached == nullptr) {
    base_->Read(indices, out, worker != nullptr ? worker->base.get() : nullptr);
    return;
  }
  if (worker == nullptr) {
    cached->Read(indices, out, nullptr);
    return;
  }
  if (worker->cached_for != cached) {
    worker->cached = cached->NewWorkerState();
    worker->cached_for = cached;
  }
  cached->Read(indices, out, worker->cached.get());
}

}  // namespace gpufeed
