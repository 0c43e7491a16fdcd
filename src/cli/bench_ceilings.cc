#include "cli/bench_ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "gpufeed/device.h"

namespace gpufeed::cli {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

double MeasureMemcpyCeiling(int64_t total_bytes, int64_t chunk_bytes, int threads) {
  if (total_bytes <= 0 || chunk_bytes <= 0) return 0;
  threads = std::max(1, threads);
  // Each thread copies whole chunks from its own source into its own destination, as a
  // worker writes a batch buffer. A source holds at least two chunks and 128 MB, and the
  // copies cycle through its chunk slots, so consecutive copies read different bytes, none
  // of them still in a cache (a source of one chunk, as batches of 64 MB and more had,
  // copied the same bytes every time).
  // Both sides come from the host device's allocator, as the loader's batch buffers do, so
  // the ceiling and the loader write the same kind of memory.
  const auto chunk = static_cast<size_t>(chunk_bytes);
  const size_t slots = std::max<size_t>(2, ((size_t{128} << 20) + chunk - 1) / chunk);
  const size_t source_bytes = slots * chunk;
  const std::shared_ptr<Device> host = HostDevice();
  const auto owned = [&](size_t n) {
    return std::unique_ptr<char, std::function<void(char*)>>(
        static_cast<char*>(host->AllocHost(n)), [host](char* p) { host->FreeHost(p); });
  };
  std::vector<std::unique_ptr<char, std::function<void(char*)>>> sources(
      static_cast<size_t>(threads));
  std::vector<std::unique_ptr<char, std::function<void(char*)>>> targets(
      static_cast<size_t>(threads));
  ThreadPool pool(threads);
  pool.ParallelFor(threads, [&](int64_t t, int) {
    sources[static_cast<size_t>(t)] = owned(source_bytes);
    std::memset(sources[static_cast<size_t>(t)].get(), static_cast<int>(t + 1), source_bytes);
    targets[static_cast<size_t>(t)] = owned(chunk);
  });
  const int64_t chunks = (total_bytes + chunk_bytes - 1) / chunk_bytes;
  std::vector<size_t> next_slot(static_cast<size_t>(threads), 0);
  const auto start = std::chrono::steady_clock::now();
  pool.ParallelFor(chunks, [&](int64_t /*chunk*/, int thread) {
    const char* src = sources[static_cast<size_t>(thread)].get();
    char* dst = targets[static_cast<size_t>(thread)].get();
    // This thread's copies step through its source's slots in turn (only this thread
    // touches its counter).
    const size_t offset = next_slot[static_cast<size_t>(thread)]++ % slots * chunk;
    std::memcpy(dst, src + offset, chunk);
  });
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  return s > 0 ? static_cast<double>(chunks * chunk_bytes) / s : 0;
}

double MeasureSameWork(const Source& source, const Sampler& sampler, int epochs, int threads) {
  threads = std::max(1, threads);
  const int64_t batches = sampler.batches_per_epoch();
  if (batches == 0 || epochs <= 0) return 0;
  const Schema& schema = source.schema();
  // Batches in a plan: packed plans carry their boundaries, plain ones are batch_size apart.
  const auto BatchesIn = [&](const EpochPlan& plan) {
    return plan.batch_starts.empty() ? batches : static_cast<int64_t>(plan.batch_starts.size()) - 1;
  };
  // The loader's own plans (group packing included when the loader packs groups), made
  // before the clock starts; buffers hold the largest batch among them. As in the loader,
  // each batch's samples are computed by the thread that reads it.
  std::vector<EpochPlan> plans;
  size_t batch_rows = 1;
  int64_t samples_planned = 0;
  for (int e = 0; e < epochs; ++e) {
    plans.push_back(sampler.Plan(e));
    for (int64_t b = 0; b < BatchesIn(plans.back()); ++b) {
      const int64_t rows = sampler.BatchRows(plans.back(), b);
      batch_rows = std::max(batch_rows, static_cast<size_t>(rows));
      samples_planned += rows;
    }
  }
  // Batch buffers from the host device, as the loader's (the process-wide pool hands back
  // the loader's own, already faulted in), one set per thread, one buffer per field.
  const std::shared_ptr<Device> host = HostDevice();
  struct Buffers {
    std::vector<void*> blocks;
    BatchView view;
    std::unique_ptr<SourceWorkerState> state;
  };
  std::vector<Buffers> per_thread(static_cast<size_t>(threads));
  struct FreeAll {
    std::vector<Buffers>& sets;
    const std::shared_ptr<Device>& device;
    ~FreeAll() {
      for (auto& set : sets) {
        for (void* p : set.blocks) device->FreeHost(p);
      }
    }
  } free_all{per_thread, host};
  for (auto& set : per_thread) {
    for (const auto& field : schema.fields) {
      const size_t bytes = std::max<size_t>(1, field.SampleBytes() * batch_rows);
      set.blocks.push_back(host->AllocHost(bytes));
      set.view.fields.push_back(static_cast<std::byte*>(set.blocks.back()));
    }
    set.state = source.NewWorkerState();
  }
  ThreadPool pool(threads);
  const auto start = std::chrono::steady_clock::now();
  for (int e = 0; e < epochs; ++e) {
    const EpochPlan& plan = plans[static_cast<size_t>(e)];
    pool.ParallelFor(BatchesIn(plan), [&](int64_t b, int thread) {
      Buffers& set = per_thread[static_cast<size_t>(thread)];
      const std::vector<int64_t> rows = sampler.BatchOf(plan, b);
      set.view.rows = static_cast<int64_t>(rows.size());
      source.Read(rows, set.view, set.state.get());
    });
  }
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  return s > 0 ? static_cast<double>(samples_planned) / s : 0;
}

}  // namespace gpufeed::cli
