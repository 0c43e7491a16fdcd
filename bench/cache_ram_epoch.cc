// cache_ram_epoch: a shuffled epoch served from the RAM cache, against the memcpy ceiling of
// the same bytes on the same number of threads, both measured in this run.
//
//   bench_cache_ram_epoch [--path DIR] [--mb 820] [--batch 8192] [--workers 2] [--epochs 5]
//
// Without --path the data set is synthetic (mel float32[1,64,32] + label int64, like the demo
// set) of about --mb megabytes. The cache is preloaded; each epoch's GB/s (batches delivered
// to a consumer that takes them at once) is printed, then the best epoch over the ceiling:
// the same number of threads memcpy-ing batch-sized contiguous blocks of an equally large
// array into as many batch buffers as the loader's pool holds.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

// The best of two sequential copies of `bytes` into batch buffers: whole batch-sized memcpy
// calls (glibc streams those past the cache with non-temporal stores) and the same bytes in
// row-sized calls (cached stores, like the gather). The threads write into `buffers` batch
// buffers in turn, as many as the loader's pool holds: one buffer per thread, rewritten
// again and again, would stay in the CPU cache at small batch sizes and measure the cache,
// not memory.
double MemcpyCeilingGBs(size_t bytes, size_t batch_bytes, size_t row_bytes, int threads,
                        int buffers) {
  std::vector<std::byte> src(bytes, std::byte{1});
  const int per_thread = std::max(1, (buffers + threads - 1) / threads);
  std::vector<std::vector<std::vector<std::byte>>> dst(
      threads, std::vector<std::vector<std::byte>>(
                   per_thread, std::vector<std::byte>(batch_bytes, std::byte{0})));
  double best = 0;
  for (int round = 0; round < 6; ++round) {
    const size_t piece = round % 2 == 0 ? batch_bytes : row_bytes;
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    const size_t blocks = bytes / batch_bytes;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (size_t b = static_cast<size_t>(t); b < blocks; b += static_cast<size_t>(threads)) {
          std::byte* out = dst[t][(b / threads) % static_cast<size_t>(per_thread)].data();
          for (size_t at = 0; at + piece <= batch_bytes; at += piece) {
            std::memcpy(out + at, src.data() + b * batch_bytes + at, piece);
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, static_cast<double>(blocks * batch_bytes) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("RAM-cached epoch vs the memcpy ceiling");
  std::string path;
  int64_t mb = 820;
  int64_t batch = 8192;
  int workers = 2;
  int epochs = 5;
  app.add_option("--path", path, "NumPy folder or HDF5 file (default: synthetic)");
  app.add_option("--mb", mb, "Synthetic data set size in MB");
  app.add_option("--batch", batch, "Batch size (the demo's 8192 by default)");
  app.add_option("--workers", workers, "Loader workers (and memcpy threads)");
  app.add_option("--epochs", epochs, "Epochs to time");
  CLI11_PARSE(app, argc, argv);

  const gpufeed::Schema schema = gpufeed::ParseSchema("mel:float32[1,64,32],label:int64[]");
  auto base = path.empty()
                  ? gpufeed::OpenSynthetic(
                        schema, mb * 1000000 / static_cast<int64_t>(schema.SampleBytes()), 1)
                  : gpufeed::OpenPath(path, {});
  gpufeed::CacheInfo info;
  const auto preload_start = Clock::now();
  auto cached =
      gpufeed::OpenCached(base, {.tier = gpufeed::CacheTier::kRam, .preload = true, .threads = workers}, &info);
  const double preload_s = std::chrono::duration<double>(Clock::now() - preload_start).count();
  fmt::print("data set: {} ({:.0f} MB), RAM cache preloaded in {:.2f} s\n", base->Describe(),
             static_cast<double>(info.bytes) / 1e6, preload_s);

  gpufeed::LoaderOptions options;
  options.batch_size = batch;
  options.workers = workers;
  gpufeed::Loader loader(cached, options);
  double best = 0;
  for (int e = 0; e < epochs; ++e) {
    int64_t bytes = 0;
    const auto start = Clock::now();
    while (auto b = loader.Next()) {
      for (int f = 0; f < static_cast<int>(b->schema().fields.size()); ++f)
        bytes += b->field(f).bytes();
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    const double gbs = static_cast<double>(bytes) / s / 1e9;
    best = std::max(best, gbs);
    fmt::print("epoch {}: {:.2f} GB/s ({:.3f} s)\n", e, gbs, s);
  }
  const double ceiling = MemcpyCeilingGBs(static_cast<size_t>(info.bytes),
                                          static_cast<size_t>(batch) * schema.SampleBytes(),
                                          schema.SampleBytes(), workers, loader.stats().buffers);
  fmt::print(
      "memcpy ceiling ({} threads into {} batch buffers of {} KB, best of whole-batch "
      "and per-row calls): {:.2f} GB/s\n",
      workers, loader.stats().buffers, static_cast<size_t>(batch) * schema.SampleBytes() / 1024,
      ceiling);
  fmt::print("RAM-cached epoch / memcpy ceiling = {:.2f} (target >= 0.6)\n", best / ceiling);
  return 0;
}
