// BackgroundCachedSource: a cache made while the loader runs. It serves every read from the
// source it starts with (the base source, or a RAM copy that fills on touch) while a filler
// thread makes the copy, and from the copy once it is complete. Each read is served wholly by
// one of the two, chosen by one atomic load; both hold the same bytes, so an epoch that spans
// the switch gives exactly the batches it would give without it (the sampler is the loader's
// and never changes).
//
// The filler runs at the lowest priority (nice 19: a loaded machine still lets it stop
// promptly, which SCHED_IDLE does not) and its thread pools inherit that. It runs under a
// CancelToken of its own, which the destructor cancels before it joins the thread: a build
// stops within one of its tasks (a few MB), removes its tmp file and publishes nothing.
//
// A failed fill is never silent: its error (a corrupt or unreadable source row, a refused
// cache folder) is thrown by every read after it, so the loader raises it on its next batch.
// A fill that ends without a copy (no room in /dev/shm: already warned) leaves the reads on
// the source. CacheProgress says which, and how far the fill is.
// Thread-safety: thread-safe like every Source.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cache/tier_choice.h"
#include "gpufeed/cache.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "gpufeed/source.h"

namespace gpufeed {

class BackgroundCachedSource : public Source {
 public:
  // What a fill made: the copy to serve from (null: keep serving the first source), the tier
  // that now serves, and why.
  struct Filled {
    std::shared_ptr<Source> copy;
    CacheTier tier = CacheTier::kNone;
    std::string reason;
    bool built = false;  // this process made the copy
  };
  // Runs on the filler thread, under the filler's cancel token; updates the progress's
  // fraction as it goes. Throws what the copy's making throws.
  using Fill = std::function<Filled(CacheProgress& progress)>;

  // Serves `serving` and starts the filler. `progress` starts as the caller says (the tier
  // serving now, the reason); the filler finishes it.
  // `verbose`: log the switch.
  BackgroundCachedSource(std::shared_ptr<Source> serving, Fill fill,
                         std::shared_ptr<CacheProgress> progress, bool verbose);
  // Cancels the fill and joins the filler. Never throws.
  ~BackgroundCachedSource() override;
  BackgroundCachedSource(const BackgroundCachedSource&) = delete;
  BackgroundCachedSource& operator=(const BackgroundCachedSource&) = delete;

  const Schema& schema() const override { return serving_->schema(); }
  int64_t size() const override { return serving_->size(); }
  std::string Identity() const override { return serving_->Identity(); }
  std::string Describe() const override { return Current().Describe(); }
  int64_t PreferredBlock() const override { return Current().PreferredBlock(); }
  SourceChunking chunking() const override { return Current().chunking(); }
  CacheTier cache_tier() const override { return Current().cache_tier(); }
  // The counters of the source it starts with, the tier serving now and the share of the copy
  // made.
  SourceStats Stats() const override;
  bool shareable_across_processes() const override {
    return serving_->shareable_across_processes();
  }
  bool rows_repeat() const override { return serving_->rows_repeat(); }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;
  void ReadSeeded(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
                  uint64_t seed) const override;

  // Whether the reads come from the finished copy now.
  bool switched() const { return copy_.load(std::memory_order_acquire) != nullptr; }
  // Waits until the filler has ended or `timeout_s` passed; returns whether it ended.
  bool WaitForFill(double timeout_s) const { return progress_->WaitUntilDone(timeout_s); }

 private:
  const Source& Current() const {
    const Source* copy = copy_.load(std::memory_order_acquire);
    return copy != nullptr ? *copy : *serving_;
  }
  template <typename ReadFn>
  void ReadWith(SourceWorkerState* state, ReadFn read) const;
  void Run(const Fill& fill);

  const std::shared_ptr<Source> serving_;
  const std::shared_ptr<CacheProgress> progress_;
  const bool verbose_;
  std::shared_ptr<Source> copy_owner_;  // written once by the filler, before copy_ is stored
  std::atomic<const Source*> copy_{nullptr};
  std::atomic<bool> failed_{false};
  ErrorCode error_code_ = ErrorCode::kIo;  // written once, before failed_ is stored
  std::string error_;
  CancelToken cancel_;
  std::thread filler_;  // last: started once every member above exists
};

// The two fills OpenCached starts (background_fill.cc). Each returns the source to serve
// and sets info.progress (and, for shm, info.key and info.path).
//
// The shm cache of `base` in `options.shm_dir` (the folder `group` says), made by
// OpenShmCache on `threads` threads: built here, or, while another process builds it, waited
// for (streaming meanwhile) and then mapped. The folder is opened (and made) before this
// returns: a refused folder throws Error(kIo) here, as a foreground build does.
std::shared_ptr<Source> StartShmFill(std::shared_ptr<Source> base, const CacheOptions& options,
                                     std::optional<gid_t> group, int threads, CacheInfo& info);
// "auto" on a cold cache: the gather probe (which takes seconds on a slow source) runs on the
// filler, which then makes the copy ChooseTier(in) picks from it (an shm cache as above, a RAM
// copy: preloaded when options.preload, else filling on touch from the switch), or none.
// info.tier is kNone until then (the progress says what was chosen).
std::shared_ptr<Source> StartAutoFill(std::shared_ptr<Source> base, const CacheOptions& options,
                                      TierInputs in, std::optional<gid_t> group, int threads,
                                      CacheInfo& info);
// A RAM copy of `base` that fills on touch and is preloaded on `threads` threads meanwhile.
std::shared_ptr<Source> StartRamPreload(std::shared_ptr<Source> base, const CacheOptions& options,
                                        int threads, CacheInfo& info);

}  // namespace gpufeed
