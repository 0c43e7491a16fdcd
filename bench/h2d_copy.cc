// h2d_copy: host-to-device GB/s through the loader's path (rows gathered into pinned staging
// by the workers, one copy stream, an event per batch, the consumer synchronizing on it)
// against a plain pinned cuMemcpyHtoDAsync of the same bytes, both measured in this run,
// and their ratio. A second ceiling is the gather alone: the same rows copied by `workers`
// threads from pageable memory into pinned buffers, with no transfer. The loader's path
// does both, overlapped, so its ceiling is the lower of the two; the ratio to that ceiling
// is the loader's own cost.
//
//   bench_h2d_copy [--device cuda:0] [--batch-mib 16] [--batches 200] [--workers 4]
//
// Runs against any libcuda.so.1, including the test double (GPUFEED_CUDA_LIBRARY pointing
// at the fake): then it says so, and its figures mean nothing.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_bench_device.h"
#include "device/cuda_device.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kRowBytes = 64 << 10;  // one 64 KiB uint8 row per sample

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Back-to-back copies of one pinned buffer into one device buffer, then one synchronize.
double PlainCopyGBs(gpufeed::Device& device, size_t bytes, int copies) {
  void* host = device.AllocHost(bytes);
  void* target = device.AllocDevice(bytes);
  std::memset(host, 1, bytes);
  auto stream = device.NewStream();
  for (int i = 0; i < 3; ++i) stream->CopyToDevice(target, host, bytes);  // warm-up
  stream->Synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < copies; ++i) stream->CopyToDevice(target, host, bytes);
  stream->Synchronize();
  const double seconds = Seconds(start);
  stream.reset();
  device.FreeDevice(target);
  device.FreeHost(host);
  return static_cast<double>(bytes) * copies / seconds / 1e9;
}

// The rows of `batches` batches gathered by `workers` threads (each batch by one thread, as
// the loader's workers do) from pageable memory into pinned buffers: the host side alone.
double HostGatherGBs(gpufeed::Device& device, const std::vector<uint8_t>& data, int64_t rows,
                     int batches, int workers) {
  const size_t bytes = static_cast<size_t>(rows * kRowBytes);
  const int64_t samples = static_cast<int64_t>(data.size()) / kRowBytes;
  std::vector<void*> pinned(static_cast<size_t>(workers));
  for (auto& buffer : pinned) {
    buffer = device.AllocHost(bytes);
    std::memset(buffer, 0, bytes);  // first touch, outside the timing
  }
  const auto gather = [&](int worker, int first_batch) {
    auto* out = static_cast<uint8_t*>(pinned[static_cast<size_t>(worker)]);
    for (int b = first_batch; b < batches; b += workers) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = (int64_t{b} * rows + r) % samples;
        std::memcpy(out + r * kRowBytes, data.data() + row * kRowBytes, kRowBytes);
      }
    }
  };
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(gather, w, w);
  for (auto& thread : threads) thread.join();
  const double seconds = Seconds(start);
  for (void* buffer : pinned) device.FreeHost(buffer);
  return static_cast<double>(bytes) * batches / seconds / 1e9;
}

// Eight batches' worth of distinct rows: enough that a gather reads memory, not cache.
std::shared_ptr<std::vector<uint8_t>> BenchRows(int64_t rows) {
  const int64_t samples = rows * 8;
  auto data = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(samples * kRowBytes));
  for (size_t i = 0; i < data->size(); i += 4096) (*data)[i] = static_cast<uint8_t>(i >> 12);
  return data;
}

// Batches through the loader with the consumer waiting for each copy, as a training step
// that reads the batch at once would.
double LoaderGBs(const std::shared_ptr<gpufeed::Device>& device,
                 const std::shared_ptr<std::vector<uint8_t>>& data, int64_t rows, int batches,
                 int workers, gpufeed::LoaderStats* stats) {
  const int64_t samples = static_cast<int64_t>(data->size()) / kRowBytes;
  gpufeed::MemoryField field;
  field.spec = {"row", gpufeed::DType::kUInt8, {kRowBytes}};
  field.data = data->data();
  field.samples = samples;
  gpufeed::LoaderOptions options;
  options.batch_size = rows;
  options.shuffle = false;
  options.workers = workers;
  options.device = device;
  gpufeed::Loader loader(gpufeed::OpenMemory({field}, data), options);

  const auto next = [&loader] {
    auto batch = loader.Next();
    if (!batch) batch = loader.Next();  // the epoch ended: go on with the next one
    batch->Synchronize();
  };
  // Warm-up: the pools allocate their pinned and device buffers once, on first use.
  for (int i = 0; i < workers + 4; ++i) next();
  const auto start = Clock::now();
  for (int i = 0; i < batches; ++i) next();
  const double seconds = Seconds(start);
  *stats = loader.stats();
  return static_cast<double>(rows * kRowBytes) * batches / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("host-to-device GB/s: the loader's path against a plain pinned copy");
  std::string spec = "cuda";
  int batch_mib = 16;
  int batches = 200;
  int workers = 4;
  app.add_option("-d,--device", spec, "cuda or cuda:N")->capture_default_str();
  app.add_option("--batch-mib", batch_mib, "MiB per batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--batches", batches, "batches timed per side")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--workers", workers, "loader workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);

  try {
    const auto cuda = gpufeed::bench::OpenBenchCudaDevice(spec, "h2d_copy",
                                                          "host memcpy on one thread per stream");
    if (cuda == nullptr) return 2;
    const std::shared_ptr<gpufeed::Device> device = cuda;
    const int64_t rows = std::max<int64_t>(1, (int64_t{batch_mib} << 20) / kRowBytes);
    const size_t bytes = static_cast<size_t>(rows * kRowBytes);
    std::printf("batch: %lld rows x %lld bytes = %.1f MiB, %d batches per side, %d workers\n",
                static_cast<long long>(rows), static_cast<long long>(kRowBytes),
                static_cast<double>(bytes) / (1 << 20), batches, workers);

    const auto data = BenchRows(rows);
    const double plain_before = PlainCopyGBs(*device, bytes, batches);
    const double gather = HostGatherGBs(*device, *data, rows, batches, workers);
    gpufeed::LoaderStats stats;
    const double loader = LoaderGBs(device, data, rows, batches, workers, &stats);
    const double plain_after = PlainCopyGBs(*device, bytes, batches);
    const double plain = (plain_before + plain_after) / 2;
    const double ceiling = std::min(plain, gather);

    std::printf("plain pinned copy: %.2f GB/s (%.2f before, %.2f after the loader)\n", plain,
                plain_before, plain_after);
    std::printf("host gather:       %.2f GB/s (%d threads into pinned memory, no transfer)\n",
                gather, workers);
    std::printf("loader path:       %.2f GB/s\n", loader);
    std::printf("ratio loader/plain: %.3f\n", loader / plain);
    std::printf("ratio loader/ceiling: %.3f (ceiling: the %s)\n", loader / ceiling,
                gather < plain ? "host gather" : "plain copy");
    std::printf("loader stats: %s\n", stats.ToJson().c_str());
    const auto ds = cuda->stats();
    std::printf("device: %lld copies, %.1f MiB pinned and %.1f MiB device memory allocated\n",
                static_cast<long long>(ds.copies),
                static_cast<double>(ds.host_bytes_allocated) / (1 << 20),
                static_cast<double>(ds.device_bytes_allocated) / (1 << 20));
    return 0;
  } catch (const gpufeed::Error& e) {
    std::fprintf(stderr, "h2d_copy: %s\n", e.what());
    return 1;
  }
}
