// first_touch: what memory this process has never touched costs to fault in, on 2 MiB
// (MADV_HUGEPAGE) and 4 KiB pages, by one thread and by two, each after an idle spell in which
// a VM with free-page reporting hands freed memory back to its host. Then the same bytes
// written again, warm, for comparison. This is the floor under a new process's first batches:
// every batch buffer a loader makes (its own pool, or a DataLoader's) is such memory.
//
//   bench_first_touch [--mib 512] [--idle-s 15] [--batch-mib 67]
//
// Printed per case: seconds and GB/s of the first touch, GB/s of the warm rewrite, and what
// one batch buffer of --batch-mib costs to fault in at that rate.
#include <fmt/format.h>
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Figures {
  double touch_s = 0;
  double warm_s = 0;
};

// Maps `bytes` of fresh anonymous memory at a 2 MiB boundary, sleeps `idle_s`, then writes
// one byte per 4 KiB page from `threads` threads (the first touch), then memsets it all
// (warm).
Figures Measure(size_t bytes, bool huge, int threads, double idle_s) {
  constexpr size_t kAlign = size_t{2} << 20;
  void* raw =
      mmap(nullptr, bytes + kAlign, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    throw std::runtime_error(
        fmt::format("mmap of {} bytes failed: {}", bytes, std::strerror(errno)));
  }
  auto* p =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kAlign - 1) & ~(kAlign - 1));
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
  Figures f;
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  const size_t per = bytes / static_cast<size_t>(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      volatile char* b = p + per * static_cast<size_t>(t);
      for (size_t o = 0; o < per; o += 4096) b[o] = 1;
    });
  }
  for (auto& t : pool) t.join();
  f.touch_s = Since(t0);
  const auto t1 = Clock::now();
  std::memset(p, 2, bytes);
  f.warm_s = Since(t1);
  munmap(raw, bytes + kAlign);
  return f;
}

// Prints the four cases.
void Run(size_t bytes, double idle_s, double batch_mib) {
  for (const bool huge : {true, false}) {
    for (const int threads : {1, 2}) {
      const Figures f = Measure(bytes, huge, threads, idle_s);
      const double gbs = static_cast<double>(bytes) / f.touch_s / 1e9;
      fmt::print("{:<24} {:>10.3f} s {:>9.2f} GB/s {:>7.2f} GB/s {:>14.3f} s\n",
                 fmt::format("{}, {} thread{}", huge ? "2 MiB pages" : "4 KiB pages", threads,
                             threads > 1 ? "s" : ""),
                 f.touch_s, gbs, static_cast<double>(bytes) / f.warm_s / 1e9,
                 batch_mib * (1 << 20) / (gbs * 1e9));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"First touch of fresh memory: the floor under a new process's first batches"};
  size_t mib = 512;
  double idle_s = 15;
  double batch_mib = 67;
  app.add_option("--mib", mib, "Fresh memory per case, MiB")->check(CLI::Range(16, 1 << 14));
  app.add_option("--idle-s", idle_s, "Idle seconds before each touch (lets the host reclaim)")
      ->check(CLI::Range(0.0, 600.0));
  app.add_option("--batch-mib", batch_mib, "Batch buffer size to price, MiB (8192 x 8 KB = 67)")
      ->check(CLI::Range(1.0, 65536.0));
  CLI11_PARSE(app, argc, argv);
  const size_t bytes = mib << 20;
  fmt::print("{} MiB of fresh memory per case, {} s idle before each touch\n", mib, idle_s);
  // "2 MiB pages" asks for them with MADV_HUGEPAGE; the kernel gives them only when this
  // says "always" or "madvise".
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  fmt::print("transparent huge pages: {}\n", mode.empty() ? "unknown" : mode);
  fmt::print("{:<24} {:>12} {:>14} {:>12} {:>16}\n", "case", "first touch", "", "warm rewrite",
             fmt::format("{} MiB buffer", batch_mib));
  try {
    Run(bytes, idle_s, batch_mib);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_first_touch: {}\n", e.what());
    return 1;
  }
  return 0;
}
