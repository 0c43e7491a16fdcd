// RamCachedSource: the whole data set in this process's RAM, one contiguous array per field
// (anonymous memory, huge-page advised), filled on first touch or by Preload.
//
// Each sample has a state: empty, filling (one worker claimed it) or filled. A worker whose
// batch has misses claims the empty ones, reads all its misses from the base source in one
// Read, copies them out, writes the claimed ones into the arrays and publishes them with a
// release store; a sample another worker is filling is read from the base source too rather
// than waited for. So no two threads ever write the same bytes, and a reader sees a filled
// sample's bytes through the acquire load of its state.
// Thread-safety: thread-safe. Preload may run while Read is called.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/cached_source.h"

namespace gpufeed {

class RamCachedSource : public CachedSource {
 public:
  // Reserves the arrays (pages are committed as they are written). Throws Error(kIo) when
  // the memory cannot be reserved.
  explicit RamCachedSource(std::shared_ptr<Source> base);
  ~RamCachedSource() override;

  std::string Describe() const override;
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;

  // Reads every sample not filled yet, on `threads` threads; progress logged when
  // `verbose` and it takes longer than 2 s. Rethrows the base source's first error; throws
  // Error(kCancelled) when the calling thread's CancelToken (gpufeed/cancel.h) is cancelled
  // (the samples read so far stay filled). `on_progress`, when given, is called (one call at a
  // time) with the share of the samples filled after every few MB.
  void Preload(int threads, bool verbose, const std::function<void(double)>& on_progress = {});
  int64_t filled_samples() const { return filled_.load(std::memory_order_relaxed); }

 private:
  enum : uint8_t { kEmpty = 0, kFilling = 1, kFilled = 2 };

  std::byte* Row(size_t field, int64_t index) const {
    return arrays_[field] + static_cast<size_t>(index) * row_bytes_[field];
  }

  std::vector<size_t> row_bytes_;
  std::vector<std::byte*> arrays_;
  std::vector<const std::byte*> const_arrays_;  // the same, for GatherCachedRows
  std::vector<size_t> array_bytes_;
  std::unique_ptr<std::atomic<uint8_t>[]> state_;
  mutable std::atomic<int64_t> filled_{0};
};

}  // namespace gpufeed
