// cache_device_gather: the device cache tier's batch path on a GPU. A synthetic data set is
// uploaded once (OpenCached tier "device"), then three figures are taken in this run:
//   gather kernel   DeviceStream::GatherRows of shuffled rows, back to back, one synchronize
//   device tier     the loader over the resident set, the consumer synchronizing each batch
//   streaming       the loader over the same set from host memory (pinned staging + copy)
// in GB/s of batch bytes, with the upload's time. For a real GPU: on gpufeed's fake driver
// (GPUFEED_CUDA_LIBRARY pointing at it) it says so, and the figures mean nothing.
//
//   bench_cache_device_gather [--device cuda] [--samples 200000] [--row-bytes 1024]
//                             [--batch-size 8192] [--batches 200] [--workers 4]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_bench_device.h"
#include "device/cuda_device.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Batches through a loader, each synchronized as a step that reads it at once would.
double LoaderGBs(const std::shared_ptr<gpufeed::Source>& source,
                 const std::shared_ptr<gpufeed::Device>& device, int64_t batch_size, int batches,
                 int workers, size_t row_bytes) {
  gpufeed::LoaderOptions options;
  options.batch_size = batch_size;
  options.workers = workers;
  options.device = device;
  gpufeed::Loader loader(source, options);
  const auto next = [&loader] {
    auto batch = loader.Next();
    if (!batch) batch = loader.Next();
    batch->Synchronize();
  };
  for (int i = 0; i < workers + 4; ++i) next();  // warm-up
  const auto start = Clock::now();
  for (int i = 0; i < batches; ++i) next();
  return static_cast<double>(batch_size) * row_bytes * batches / Seconds(start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("device cache tier: gather kernel, loader over resident rows, streaming");
  std::string spec = "cuda";
  int64_t samples = 200000;
  int64_t row_bytes = 1024;
  int64_t batch_size = 8192;
  int batches = 200;
  int workers = 4;
  app.add_option("-d,--device", spec, "cuda or cuda:N")->capture_default_str();
  app.add_option("--samples", samples, "samples in the data set")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--row-bytes", row_bytes, "bytes per sample (a float32 field)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 24));
  app.add_option("-b,--batch-size", batch_size, "samples per batch")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--batches", batches, "batches timed per figure")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--workers", workers, "loader workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);

  try {
    const auto cuda = gpufeed::bench::OpenBenchCudaDevice(
        spec, "cache_device_gather", "the gather kernel's host twin on one thread per stream");
    if (cuda == nullptr) return 2;
    const std::shared_ptr<gpufeed::Device> device = cuda;
    const int64_t floats = std::max<int64_t>(1, row_bytes / 4);
    const gpufeed::Schema schema = gpufeed::ParseSchema(fmt::format("x:float32[{}]", floats));
    const size_t row = schema.SampleBytes();
    auto base = gpufeed::OpenSynthetic(schema, samples, 1);
    std::printf("data set: %lld samples x %zu bytes = %.1f MiB; batch %lld rows = %.1f MiB\n",
                static_cast<long long>(samples), row,
                static_cast<double>(row) * samples / (1 << 20), static_cast<long long>(batch_size),
                static_cast<double>(row) * batch_size / (1 << 20));

    gpufeed::CacheOptions cache;
    cache.tier = gpufeed::CacheTier::kDevice;
    cache.device = device;
    cache.verbose = false;
    gpufeed::CacheInfo info;
    auto resident = gpufeed::OpenCached(base, cache, &info);
    std::printf("upload: %.3f s (%.2f GB/s) -- %s\n", info.open_seconds,
                static_cast<double>(info.bytes) / info.open_seconds / 1e9, info.ToString().c_str());

    // The kernel alone: shuffled rows into one batch buffer, back to back.
    const auto* rows = resident->device_rows();
    void* target = device->AllocDevice(row * static_cast<size_t>(batch_size));
    std::vector<int64_t> indices(static_cast<size_t>(samples));
    std::iota(indices.begin(), indices.end(), 0);
    std::shuffle(indices.begin(), indices.end(), std::mt19937_64(7));
    const auto batch_rows = [&](int i) {
      const size_t begin = static_cast<size_t>(i * batch_size) % indices.size();
      const size_t n = std::min<size_t>(static_cast<size_t>(batch_size), indices.size() - begin);
      return std::span<const int64_t>(indices.data() + begin, n);
    };
    double kernel_gbs = 0;
    {
      auto stream = device->NewStream();
      for (int i = 0; i < 4; ++i) stream->GatherRows(target, rows->fields[0], row, batch_rows(i));
      stream->Synchronize();
      uint64_t bytes = 0;
      const auto start = Clock::now();
      for (int i = 0; i < batches; ++i) {
        const auto r = batch_rows(i);
        stream->GatherRows(target, rows->fields[0], row, r);
        bytes += r.size() * row;
      }
      stream->Synchronize();
      kernel_gbs = static_cast<double>(bytes) / Seconds(start) / 1e9;
    }
    device->FreeDevice(target);

    const double tier_gbs = LoaderGBs(resident, device, batch_size, batches, workers, row);
    const double streaming_gbs = LoaderGBs(base, device, batch_size, batches, workers, row);
    std::printf("gather kernel:        %8.2f GB/s\n", kernel_gbs);
    std::printf("loader, device tier:  %8.2f GB/s\n", tier_gbs);
    std::printf("loader, streaming:    %8.2f GB/s (synthetic source, pinned staging + copy)\n",
                streaming_gbs);
    std::printf("ratio device tier / streaming: %.2f\n", tier_gbs / streaming_gbs);
    const auto ds = cuda->stats();
    std::printf(
        "device: %lld gathers (%.1f MiB), %lld copies\n", static_cast<long long>(ds.gathers),
        static_cast<double>(ds.gather_bytes) / (1 << 20), static_cast<long long>(ds.copies));
    return 0;
  } catch (const gpufeed::Error& e) {
    std::fprintf(stderr, "cache_device_gather: %s\n", e.what());
    return 1;
  }
}
