// DeferredCachedSource: a source that can start caching itself later, while a loader reads
// it. The doctor's remedy (gpufeed/remedies.h) calls Start when the loop turns out to wait on
// reads; until then, and until the copy is made, every read goes to the source as before.
// After Start each read goes wholly to the cached source the cache's building block returned
// (CacheInTier, open_cached.h: it serves from the source until its copy is complete): the same bytes either way, so batches
// are the same as without the remedy.
// Thread-safety: thread-safe like every Source; Start may run while workers read.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "gpufeed/cache.h"
#include "gpufeed/source.h"

namespace gpufeed {

class DeferredCachedSource final : public Source {
 public:
  // `options`: the copy Start makes (an explicit tier: not auto or none). REQUIRES: the base's
  // rows repeat (Error(kInvalidArgument) otherwise).
  DeferredCachedSource(std::shared_ptr<Source> base, CacheOptions options);

  // Caches the source as the options say (CacheInTier). Returns what it started ("a RAM copy
  // (0.8 GB fits the RAM budget 11.2 GB)"); on a refusal (the set does not fit the budget) or a
  // second call, returns "" and says why in `*why`. Never throws for a refusal.
  std::string Start(std::string* why) const;

  const Schema& schema() const override { return base_->schema(); }
  int64_t size() const override { return base_->size(); }
  std::string Identity() const override { return base_->Identity(); }
  std::string Describe() const override { return Current().Describe(); }
  int64_t PreferredBlock() const override { return Current().PreferredBlock(); }
  SourceChunking chunking() const override { return Current().chunking(); }
  CacheTier cache_tier() const override { return Current().cache_tier(); }
  // The base's counters (it stays the data behind the copy); once Start has run, the copy's
  // tier and progress.
  SourceStats Stats() const override;
  bool shareable_across_processes() const override { return base_->shareable_across_processes(); }
  bool rows_repeat() const override { return base_->rows_repeat(); }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;
  // To the base while it serves the reads.
  void ReadAhead(std::span<const int64_t> indices, SourceWorkerState* state) const override;
  bool ReadsAhead() const override { return base_->ReadsAhead(); }
  int64_t ReadAheadSamples() const override { return base_->ReadAheadSamples(); }

  const Source& base() const { return *base_; }

  // `source` as a DeferredCachedSource, or null when it is another source.
  static const DeferredCachedSource* Of(const Source& source) {
    return dynamic_cast<const DeferredCachedSource*>(&source);
  }

 private:
  const Source& Current() const {
    const Source* cached = cached_.load(std::memory_order_acquire);
    return cached != nullptr ? *cached : *base_;
  }

  const std::shared_ptr<Source> base_;
  const CacheOptions options_;
  mutable std::mutex start_mu_;
  mutable bool started_ = false;  // under start_mu_
  // Set once by Start, under start_mu_; kept to the end.
  mutable std::shared_ptr<Source> cached_owner_;
  mutable std::atomic<const Source*> cached_{nullptr};
};

}  // namespace gpufeed
