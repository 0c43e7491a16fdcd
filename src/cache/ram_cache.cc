#include "cache/ram_cache.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "cache/cached_gather.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

struct RamWorkerState : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> base;
  bool made = false;
  std::vector<int64_t> miss_indices;
  std::vector<size_t> miss_rows;                // row of `out` each miss goes to
  std::vector<bool> miss_claimed;               // this worker fills the cache with it
  std::vector<std::vector<std::byte>> scratch;  // per field, the misses' rows
  std::vector<CachedRow> order;                 // (sample, row) of the hits, sorted for locality

  SourceWorkerState* Base(const Source& source) {
    if (!made) {
      base = source.NewWorkerState();
      made = true;
    }
    return base.get();
  }
};

}  // namespace

RamCachedSource::RamCachedSource(std::shared_ptr<Source> base)
    : CachedSource(std::move(base), CacheTier::kRam) {
  const int64_t samples = base_->size();
  for (const FieldSpec& field : base_->schema().fields) {
    const size_t row = field.SampleBytes();
    // At least one page so every field has a distinct, valid address.
    const size_t bytes = std::max<size_t>(row * static_cast<size_t>(samples), 4096);
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      for (size_t f = 0; f < arrays_.size(); ++f) munmap(arrays_[f], array_bytes_[f]);
      throw Error(ErrorCode::kIo,
                  fmt::format("RAM cache of {}: cannot reserve {} bytes for field '{}': {}",
                              base_->Describe(), rounded, field.name, std::strerror(err)));
    }
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: fewer TLB misses in random gathers
    row_bytes_.push_back(row);
    arrays_.push_back(static_cast<std::byte*>(p));
    const_arrays_.push_back(arrays_.back());
    array_bytes_.push_back(rounded);
  }
  state_ = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i) state_[i].store(kEmpty, std::memory_order_relaxed);
}

RamCachedSource::~RamCachedSource() {
  for (size_t f = 0; f < arrays_.size(); ++f) munmap(arrays_[f], array_bytes_[f]);
}

std::string RamCachedSource::Describe() const {
  return fmt::format("{} (cached in RAM)", base_->Describe());
}

std::unique_ptr<SourceWorkerState> RamCachedSource::NewWorkerState() const {
  return std::make_unique<RamWorkerState>();
}

void RamCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                           SourceWorkerState* state) const {
  std::unique_ptr<SourceWorkerState> local;
  auto* ws = static_cast<RamWorkerState*>(state);
  if (ws == nullptr) {
    local = NewWorkerState();
    ws = static_cast<RamWorkerState*>(local.get());
  }
  CheckReadRequest(*this, indices, out);
  ws->miss_indices.clear();
  ws->miss_rows.clear();
  ws->miss_claimed.clear();
  ws->order.clear();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t index = indices[i];
    uint8_t s = state_[index].load(std::memory_order_acquire);
    if (s == kFilled) {
      ws->order.emplace_back(index, i);
      continue;
    }
    const bool claimed = s == kEmpty && state_[index].compare_exchange_strong(
                                            s, kFilling, std::memory_order_acquire);
    if (!claimed && s == kFilled) {  // filled between the load and the exchange
      ws->order.emplace_back(index, i);
      continue;
    }
    ws->miss_indices.push_back(index);
    ws->miss_rows.push_back(i);
    ws->miss_claimed.push_back(claimed);
  }

  if (!ws->miss_indices.empty()) {
    const size_t misses = ws->miss_indices.size();
    ws->scratch.resize(arrays_.size());
    BatchView view;
    view.rows = static_cast<int64_t>(misses);
    for (size_t f = 0; f < arrays_.size(); ++f) {
      ws->scratch[f].resize(misses * row_bytes_[f]);
      view.fields.push_back(ws->scratch[f].data());
    }
    try {
      base_->Read(ws->miss_indices, view, ws->Base(*base_));
    } catch (...) {
      // Give the claims back so a later read retries these samples.
      for (size_t m = 0; m < misses; ++m) {
        if (ws->miss_claimed[m])
          state_[ws->miss_indices[m]].store(kEmpty, std::memory_order_release);
      }
      throw;
    }
    int64_t filled = 0;
    for (size_t m = 0; m < misses; ++m) {
      const int64_t index = ws->miss_indices[m];
      for (size_t f = 0; f < arrays_.size(); ++f) {
        const std::byte* row = view.fields[f] + m * row_bytes_[f];
        std::memcpy(out.fields[f] + ws->miss_rows[m] * row_bytes_[f], row, row_bytes_[f]);
        if (ws->miss_claimed[m]) std::memcpy(Row(f, index), row, row_bytes_[f]);
      }
      if (ws->miss_claimed[m]) {
        state_[index].store(kFilled, std::memory_order_release);
        ++filled;
      }
    }
    filled_.fetch_add(filled, std::memory_order_relaxed);
  }

  // Hits in sample order (the shared-memory tier gathers with the same loop).
  std::sort(ws->order.begin(), ws->order.end());
  GatherCachedRows(const_arrays_, row_bytes_, ws->order, out);
}

void RamCachedSource::Preload(int threads, bool verbose,
                              const std::function<void(double)>& on_progress) {
  GPUFEED_ASSERT(threads > 0, "threads > 0");
  const int64_t samples = size();
  const size_t sample_bytes = std::max<size_t>(1, schema().SampleBytes());
  const int64_t chunk =
      std::max<int64_t>(1, static_cast<int64_t>((size_t{4} << 20) / sample_bytes));
  const int64_t tasks = (samples + chunk - 1) / chunk;
  std::vector<std::unique_ptr<SourceWorkerState>> states(threads);
  TenthsProgress progress(verbose, static_cast<uint64_t>(samples),
                          [&](int percent, uint64_t, double s) {
                            return fmt::format("cache: preloading {} into RAM: {}% ({:.0f} s)",
                                               base_->Describe(), percent, s);
                          });
  const std::string what = fmt::format("preloading {} into RAM", base_->Describe());
  std::mutex progress_mu;
  ThreadPool pool(threads);
  pool.ParallelFor(tasks, [&](int64_t task, int thread) {
    ThrowIfCancelled(what);  // every task: a few MB
    const int64_t begin = task * chunk;
    const int64_t end = std::min(samples, begin + chunk);
    // Claim the chunk's empty samples; runs of claimed samples are read straight into the
    // arrays, which hold them contiguously.
    int64_t run = begin;
    auto flush = [&](int64_t run_end) {
      if (run_end <= run) return;
      std::vector<int64_t> indices(static_cast<size_t>(run_end - run));
      for (int64_t i = run; i < run_end; ++i) indices[i - run] = i;
      BatchView view;
      view.rows = run_end - run;
      for (size_t f = 0; f < arrays_.size(); ++f) view.fields.push_back(Row(f, run));
      if (!states[thread]) states[thread] = base_->NewWorkerState();
      try {
        base_->Read(indices, view, states[thread].get());
      } catch (...) {
        for (int64_t i = run; i < run_end; ++i) state_[i].store(kEmpty, std::memory_order_release);
        throw;
      }
      for (int64_t i = run; i < run_end; ++i) state_[i].store(kFilled, std::memory_order_release);
      filled_.fetch_add(run_end - run, std::memory_order_relaxed);
    };
    for (int64_t i = begin; i < end; ++i) {
      uint8_t expected = kEmpty;
      if (!state_[i].compare_exchange_strong(expected, kFilling, std::memory_order_acquire)) {
        flush(i);
        run = i + 1;
      }
    }
    flush(end);
    progress.Add(static_cast<uint64_t>(end - begin));
    if (on_progress && samples > 0) {
      std::lock_guard lock(progress_mu);
      on_progress(static_cast<double>(filled_samples()) / static_cast<double>(samples));
    }
  });
}

}  // namespace gpufeed
