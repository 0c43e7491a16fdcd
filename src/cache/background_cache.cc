#include "cache/background_cache.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <exception>

#include "core/log.h"

namespace gpufeed {
namespace {

// The worker state of each of the two sources, made when a read first needs it.
struct SwitchingWorkerState : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> serving;
  bool serving_made = false;
  std::unique_ptr<SourceWorkerState> copy;
  bool copy_made = false;
};

// nice 19 for the calling thread (Linux keeps a nice value per thread, and threads it starts
// inherit it): the filler takes what the training process leaves.
void LowerThisThreadsPriority() { setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19); }

}  // namespace

BackgroundCachedSource::BackgroundCachedSource(std::shared_ptr<Source> serving, Fill fill,
                                               std::shared_ptr<CacheProgress> progress,
                                               bool verbose)
    : serving_(std::move(serving)), progress_(std::move(progress)), verbose_(verbose) {
  filler_ = std::thread([this, fill = std::move(fill)] { Run(fill); });
}

BackgroundCachedSource::~BackgroundCachedSource() {
  cancel_.Cancel();
  if (filler_.joinable()) filler_.join();
}

void BackgroundCachedSource::Run(const Fill& fill) {
  LowerThisThreadsPriority();
  CancelScope scope(&cancel_);
  try {
    Filled filled = fill(*progress_);
    const bool switched = filled.copy != nullptr;
    if (switched) {
      copy_owner_ = filled.copy;
      copy_.store(copy_owner_.get(), std::memory_order_release);
    }
    progress_->Finish({.tier = filled.tier,
                       .built_fraction = switched ? 1.0 : progress_->Get().built_fraction,
                       .built = filled.built,
                       .reason = std::move(filled.reason)});
    if (switched && verbose_) {
      Log(LogLevel::kInfo, fmt::format("cache: the {} copy is complete; reading from it now",
                                       CacheTierName(filled.tier)));
    }
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    const ErrorCode code = error != nullptr ? error->code() : ErrorCode::kIo;
    CacheProgress::Snapshot last{.tier = serving_->cache_tier(),
                                 .built_fraction = progress_->Get().built_fraction};
    if (code == ErrorCode::kCancelled && cancel_.cancelled()) {
      last.reason = "stopped: the loader was closed";
    } else {
      error_code_ = code;
      error_ = fmt::format("the cache being made in the background failed: {}", e.what());
      failed_.store(true, std::memory_order_release);
      last.reason = last.error = error_;
      // Never silent, whatever `verbose` says: the next read raises it too.
      Log(LogLevel::kWarning, "cache: ERROR: " + error_);
    }
    progress_->Finish(std::move(last));
  }
}

SourceStats BackgroundCachedSource::Stats() const {
  SourceStats stats = serving_->Stats();
  stats.cache_tier = cache_tier();
  stats.cache_built_fraction = progress_->Get().built_fraction;
  return stats;
}

std::unique_ptr<SourceWorkerState> BackgroundCachedSource::NewWorkerState() const {
  return std::make_unique<SwitchingWorkerState>();
}

template <typename ReadFn>
void BackgroundCachedSource::ReadWith(SourceWorkerState* state, ReadFn read) const {
  if (failed_.load(std::memory_order_acquire)) throw Error(error_code_, error_);
  std::unique_ptr<SourceWorkerState> local;
  auto* ws = static_cast<SwitchingWorkerState*>(state);
  if (ws == nullptr) {
    local = NewWorkerState();
    ws = static_cast<SwitchingWorkerState*>(local.get());
  }
  // One load decides the whole read: its rows all come from one of the two.
  if (const Source* copy = copy_.load(std::memory_order_acquire)) {
    if (!ws->copy_made) {
      ws->copy = copy->NewWorkerState();
      ws->copy_made = true;
      ws->serving.reset();  // the source's scratch (decoded chunks) is not needed again
    }
    read(*copy, ws->copy.get());
    return;
  }
  if (!ws->serving_made) {
    ws->serving = serving_->NewWorkerState();
    ws->serving_made = true;
  }
  read(*serving_, ws->serving.get());
}

void BackgroundCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                                  SourceWorkerState* state) const {
  ReadWith(state, [&](const Source& from, SourceWorkerState* s) { from.Read(indices, out, s); });
}

void BackgroundCachedSource::ReadSeeded(std::span<const int64_t> indices, const BatchView& out,
                                        SourceWorkerState* state, uint64_t seed) const {
  ReadWith(state, [&](const Source& from, SourceWorkerState* s) {
    from.ReadSeeded(indices, out, s, seed);
  });
}

}  // namespace gpufeed
