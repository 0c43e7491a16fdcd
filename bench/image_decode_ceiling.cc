// The image decode ceiling: libjpeg-turbo's full-size RGB decode of every JPEG of an
// ImageFolder by N threads, no crop, no resize, no batching. Prints images/s as JSON.
//   bench_image_decode_ceiling FOLDER [--threads 2] [--limit N]
// A reference for gpufeed's image source (bench/images_vs_torchvision.py); prints figures,
// not a test.
#include <fcntl.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "images/list.h"

int main(int argc, char** argv) {
  CLI::App app{"libjpeg-turbo full-size decode rate of an ImageFolder's JPEGs"};
  std::string folder;
  int threads = 2;
  int64_t limit = 0;
  app.add_option("folder", folder, "ImageFolder root")->required();
  app.add_option("--threads", threads, "decoding threads (default 2)");
  app.add_option("--limit", limit, "decode only the first N files (default all)");
  CLI11_PARSE(app, argc, argv);

  const gpufeed::ImageList list = gpufeed::ListImageFolder(folder);
  const int64_t n = limit > 0 ? std::min<int64_t>(limit, static_cast<int64_t>(list.paths.size()))
                              : static_cast<int64_t>(list.paths.size());
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> pixels{0};
  std::atomic<int64_t> failed{0};
  const auto start = std::chrono::steady_clock::now();
  timespec cpu_start{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_start);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      tjhandle handle = tjInitDecompress();
      std::vector<unsigned char> bytes;
      std::vector<unsigned char> rgb;
      for (int64_t i = next++; i < n; i = next++) {
        const int fd = open(list.paths[static_cast<size_t>(i)].c_str(), O_RDONLY);
        if (fd < 0) {
          ++failed;
          continue;
        }
        const off_t size = lseek(fd, 0, SEEK_END);
        bytes.resize(static_cast<size_t>(size));
        const bool read_all = pread(fd, bytes.data(), bytes.size(), 0) == size;
        close(fd);
        int w = 0, h = 0, sub = 0, cs = 0;
        if (!read_all ||
            tjDecompressHeader3(handle, bytes.data(), bytes.size(), &w, &h, &sub, &cs) != 0) {
          ++failed;
          continue;
        }
        rgb.resize(static_cast<size_t>(w) * h * 3);
        if (tjDecompress2(handle, bytes.data(), bytes.size(), rgb.data(), w, 0, h, TJPF_RGB, 0) !=
            0) {
          ++failed;
        }
        pixels += static_cast<int64_t>(w) * h;
      }
      tjDestroy(handle);
    });
  }
  for (auto& t : pool) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  timespec cpu_end{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_end);
  const double cpu_seconds = static_cast<double>(cpu_end.tv_sec - cpu_start.tv_sec) +
                             static_cast<double>(cpu_end.tv_nsec - cpu_start.tv_nsec) * 1e-9;
  std::printf(
      "{\"images\": %lld, \"threads\": %d, \"seconds\": %.3f, \"images_per_s\": %.1f, "
      "\"cpu_seconds\": %.3f, \"images_per_cpu_s\": %.1f, "
      "\"megapixels_per_s\": %.1f, \"failed\": %lld}\n",
      static_cast<long long>(n), threads, seconds, static_cast<double>(n) / seconds, cpu_seconds,
      static_cast<double>(n) / cpu_seconds, static_cast<double>(pixels.load()) / seconds / 1e6,
      static_cast<long long>(failed.load()));
  return 0;
}
