// CachedSource: what the three cache tiers' sources (RAM, shared memory, device) share. Each
// serves the samples of a base source from a copy of its own: the size, the identity (the
// shm key and the doctor go by it), whether another process may share it, and the tier are
// the base's and the tier's, so they are written here once. Describe and Read are each
// tier's.
// Thread-safety: thread-safe like every Source; the members here are immutable.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "gpufeed/source.h"

namespace gpufeed {

class CachedSource : public Source {
 public:
  const Schema& schema() const override { return base_->schema(); }
  int64_t size() const override { return base_->size(); }
  std::string Identity() const override { return base_->Identity(); }
  CacheTier cache_tier() const override { return tier_; }
  // The base's counters (the RAM tier reads it for the rows it has not copied yet), this tier.
  SourceStats Stats() const override {
    SourceStats stats = base_->Stats();
    stats.cache_tier = tier_;
    stats.cache_built_fraction = -1;
    return stats;
  }
  bool shareable_across_processes() const override { return base_->shareable_across_processes(); }

  CacheTier tier() const { return tier_; }
  const Source& base() const { return *base_; }

 protected:
  CachedSource(std::shared_ptr<Source> base, CacheTier tier)
      : base_(std::move(base)), tier_(tier) {}

  const std::shared_ptr<Source> base_;

 private:
  const CacheTier tier_;
};

}  // namespace gpufeed
