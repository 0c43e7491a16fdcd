// Where the streaming image source's time goes, per image, on one thread: reading the file,
// its header, the decode (the random crop's window at its DCT scale, as the source does it;
// and, for reference, the whole image at full size) and the resampling to the output.
// Prints one JSON line of microseconds per image.
//   bench_image_stages FOLDER [--limit 2000] [--size 224] [--seed 1]
// Figures, not a test.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <vector>

#include "images/source.h"

namespace {

using Clock = std::chrono::steady_clock;
double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-stage time of gpufeed's streaming image source on one thread"};
  std::string folder;
  int64_t limit = 2000;
  int size = 224;
  uint64_t seed = 1;
  app.add_option("folder", folder, "ImageFolder root")->required();
  app.add_option("--limit", limit, "images (default 2000), spread over the folder");
  app.add_option("--size", size, "output side (default 224)");
  app.add_option("--seed", seed, "crop seed");
  CLI11_PARSE(app, argc, argv);

  gpufeed::ImageOptions options;
  options.size = size;
  gpufeed::ImageList list = gpufeed::ListImageFolder(folder);
  const int64_t total = static_cast<int64_t>(list.paths.size());
  const int64_t n = std::min(limit, total);
  gpufeed::ImageSet set(folder, std::move(list), options);
  gpufeed::ImageWorker worker;
  std::vector<uint8_t> chw(static_cast<size_t>(3) * size * size);
  double read_us = 0, header_us = 0, window_us = 0, full_us = 0, resample_us = 0;
  double decoded_pixels = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = i * total / n;
    const std::string& path = set.list().paths[static_cast<size_t>(index)];
    const auto t0 = Clock::now();
    worker.ReadFile(set, path);
    const auto t1 = Clock::now();
    const gpufeed::ImageHeader header = worker.decoder.ReadHeader(worker.bytes, path, 1u << 30);
    const auto t2 = Clock::now();
    gpufeed::Pcg32 rng(gpufeed::MixSeed(seed, static_cast<uint64_t>(index)));
    const gpufeed::ImageCrop rect = gpufeed::DrawCrop(header.width, header.height, options, rng);
    const gpufeed::DctScale scale = gpufeed::DctScaleFor(rect.width, rect.height, size, size);
    const double d = static_cast<double>(scale.denom) / scale.num;
    int ox = 0;
    int oy = 0;
    worker.decoder.DecodeWindow(
        worker.bytes, header, scale, static_cast<int>(rect.x / d), static_cast<int>(rect.y / d),
        static_cast<int>(std::ceil((rect.x + rect.width) / d)),
        static_cast<int>(std::ceil((rect.y + rect.height) / d)), path, worker.decoded, ox, oy);
    const auto t3 = Clock::now();
    decoded_pixels += static_cast<double>(worker.decoded.width) * worker.decoded.height /
                      (static_cast<double>(header.width) * header.height);
    gpufeed::ResampleToChw(View(worker.decoded),
                           {rect.x / d - ox, rect.y / d - oy, (rect.x + rect.width) / d - ox,
                            (rect.y + rect.height) / d - oy},
                           {size, size, 0, 0, size, size}, rect.flip, chw.data(), worker.resample);
    const auto t4 = Clock::now();
    worker.decoder.Decode(worker.bytes, header, {1, 1}, path, worker.scratch);
    const auto t5 = Clock::now();
    read_us += Us(t0, t1);
    header_us += Us(t1, t2);
    window_us += Us(t2, t3);
    resample_us += Us(t3, t4);
    full_us += Us(t4, t5);
  }
  const double k = 1.0 / static_cast<double>(n);
  std::printf(
      "{\"images\": %lld, \"read_us\": %.1f, \"header_us\": %.1f, \"window_decode_us\": %.1f, "
      "\"resample_us\": %.1f, \"streaming_us\": %.1f, \"full_decode_us\": %.1f, "
      "\"window_share_of_pixels\": %.3f}\n",
      static_cast<long long>(n), read_us * k, header_us * k, window_us * k, resample_us * k,
      (read_us + header_us + window_us + resample_us) * k, full_us * k, decoded_pixels * k);
  return 0;
}
