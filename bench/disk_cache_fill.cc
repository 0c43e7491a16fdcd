// disk_cache_fill: what filling the node-local disk cache (remote/disk_cache.h) costs on this
// disk, against two floors measured on the same folder's file system:
//   - the same bytes as block files renamed into place without any flush (publication
//     without durability);
//   - one file of the same size written and flushed once (fdatasync at the end), as
//     `dd if=/dev/zero of=X bs=1M count=N conv=fdatasync` does: the disk's durable floor.
// The cache is filled two ways: one read per block (a loader's reads: each block published
// on its own, a folder flush each) and one read of everything (blocks published in batches
// of up to 32, one folder flush per batch). The cache's base is a file in /dev/shm read
// through the POSIX file system, so the network is out of the figures: what remains is
// copying, checksumming, writing and flushing the blocks.
//
//   bench_disk_cache_fill [--dir DIR] [--mib 256] [--block-mib 8] [--runs 3]
//
// --dir must be on the disk to measure (not a tmpfs); a folder is made in it and removed.
// Each way's files are removed after it, and a first round (not counted) warms the process's
// memory, so fresh pages of a VM do not weigh on one way more than another.
// Printed: the median seconds and MB/s of each way, and each fill against the floors.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpufeed/file.h"
#include "remote/disk/disk_cache.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what + ": " + std::strerror(errno));
}

void WriteFile(const std::string& path, const std::vector<char>& bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Check(fd >= 0, "cannot create " + path);
  Check(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()),
        "cannot write " + path);
  close(fd);
}

// The object through a new disk cache in `dir`, read whole in reads of `read` bytes: every
// block fetched and kept.
double CacheFill(const std::string& object, const std::string& dir, uint64_t bytes, uint64_t block,
                 uint64_t read) {
  auto cache = gpufeed::RemoteDiskCache(
      gpufeed::PosixFileSystem(), {.dir = dir, .budget_bytes = 2 * bytes, .block_bytes = block});
  const auto file = cache->Open(object);
  std::vector<char> buf(read);
  const auto t0 = Clock::now();
  for (uint64_t at = 0; at < bytes; at += read) {
    gpufeed::ReadFully(*file, at, buf.data(), std::min(read, bytes - at), "fill");
  }
  return Since(t0);
}

// The same bytes as block files, each written under a temporary name and renamed into place,
// nothing flushed.
double RenameWithoutFlush(const std::vector<char>& data, const std::string& dir, uint64_t block) {
  std::filesystem::create_directories(dir);
  const auto t0 = Clock::now();
  for (uint64_t at = 0, index = 0; at < data.size(); at += block, ++index) {
    const std::string temp = fmt::format("{}/{}.tmp", dir, index);
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    Check(fd >= 0, "cannot create " + temp);
    const size_t n = std::min<uint64_t>(block, data.size() - at);
    Check(ftruncate(fd, static_cast<off_t>(n)) == 0, "ftruncate");
    Check(pwrite(fd, data.data() + at, n, 0) == static_cast<ssize_t>(n), "pwrite");
    close(fd);
    Check(rename(temp.c_str(), fmt::format("{}/{}", dir, index).c_str()) == 0, "rename");
  }
  return Since(t0);
}

// One file of the same size in 1 MiB writes, flushed once at the end.
double OneFileFlushedOnce(uint64_t bytes, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/dd";
  const std::vector<char> zeros(1 << 20, '\0');
  const auto t0 = Clock::now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Check(fd >= 0, "cannot create " + path);
  for (uint64_t at = 0; at < bytes; at += zeros.size()) {
    const size_t n = std::min<uint64_t>(zeros.size(), bytes - at);
    Check(write(fd, zeros.data(), n) == static_cast<ssize_t>(n), "write");
  }
  Check(fdatasync(fd) == 0, "fdatasync");
  close(fd);
  return Since(t0);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("disk_cache_fill: the disk cache's fill time against the disk's floors");
  std::string dir = std::filesystem::temp_directory_path();
  uint64_t mib = 256;
  uint64_t block_mib = 8;
  int runs = 3;
  app.add_option("--dir", dir, "A folder on the disk to measure")->capture_default_str();
  app.add_option("--mib", mib, "MiB to fill")->capture_default_str();
  app.add_option("--block-mib", block_mib, "The cache's block size, MiB")->capture_default_str();
  app.add_option("--runs", runs, "Runs of each way (the median is printed)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const uint64_t bytes = mib << 20;
  const uint64_t block = block_mib << 20;
  std::vector<char> data(bytes);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(data.data() + i, &v, 8);
  }
  const std::string object = fmt::format("/dev/shm/gpufeed-bench-disk-fill-{}", getpid());
  WriteFile(object, data);
  const std::string work = fmt::format("{}/gpufeed-bench-disk-fill-{}", dir, getpid());
  struct Way {
    const char* name;
    std::function<double(const std::string& folder)> run;
    std::vector<double> seconds = {};
  };
  std::vector<Way> ways = {
      {"disk cache fill, a read per block",
       [&](const std::string& f) { return CacheFill(object, f, bytes, block, block); }},
      {"disk cache fill, one read of all",
       [&](const std::string& f) { return CacheFill(object, f, bytes, block, bytes); }},
      {"block files renamed, nothing flushed",
       [&](const std::string& f) { return RenameWithoutFlush(data, f, block); }},
      {"one file flushed once (dd conv=fdatasync)",
       [&](const std::string& f) { return OneFileFlushedOnce(bytes, f); }},
  };
  for (int r = 0; r <= runs; ++r) {
    for (Way& way : ways) {
      sync();  // nothing dirty left over from the way before
      const std::string folder = fmt::format("{}/{}", work, &way - ways.data());
      const double s = way.run(folder);
      if (r > 0) way.seconds.push_back(s);
      std::filesystem::remove_all(folder);
    }
  }
  std::filesystem::remove_all(work);
  std::filesystem::remove(object);
  fmt::print("{} MiB in blocks of {} MiB, in {} (median of {} runs)\n", mib, block_mib, dir, runs);
  for (Way& way : ways) {
    const double s = Median(way.seconds);
    fmt::print("{:<42} {:7.3f} s  {:8.1f} MB/s\n", way.name, s,
               static_cast<double>(bytes) / s / 1e6);
  }
  const double bare = Median(ways[2].seconds), floor = Median(ways[3].seconds);
  for (int i = 0; i < 2; ++i) {
    const double fill = Median(ways[i].seconds);
    fmt::print("{}: {:.2f}x the unflushed files, {:.2f}x the durable floor\n", ways[i].name,
               fill / bare, fill / floor);
  }
  return 0;
}
