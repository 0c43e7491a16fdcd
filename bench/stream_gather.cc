// stream_gather: the ways to gather a shuffled batch of rows out of one file-backed array,
// side by side on the same rows, the same threads, in one run.
//
//   bench_stream_gather --path ~/.cache/gpufeed/demo-mel [--field mel] [--batch 8192]
//                       [--threads 2] [--epochs 2] [--seed 0] [--drop-caches]
//   bench_stream_gather --path demo.h5 --field mel ...   (a contiguous, uncompressed dataset)
//
// Both source kinds come down to the same thing here: rows of row_bytes at a file offset
// (the .npy header's data offset, or H5Dget_offset of a contiguous dataset), so the same
// candidates apply to both:
//   mmap          rows copied from a fresh MAP_SHARED mapping of the file by the sources' own
//                 loop (CopyRows: the pages of the row a few rows ahead prefetched): the
//                 NumPy path and every candidate below but pread
//   mmap, plain   the same with a plain memcpy per row, nothing prefetched (the loop before)
//   File::Map     the sources' own mapping: at a 2 MiB boundary with MADV_HUGEPAGE, a page
//                 cache in small folios dropped once and read back in 2 MiB folios (run
//                 after the other mappings, whose page cache it changes)
// Each mapping candidate also prints how much of it the kernel mapped in 2 MiB pages.
//   mmap+advise   the same mapping with MADV_HUGEPAGE and MADV_WILLNEED (hints the kernel may
//                 ignore: page-cache pages are 4 KB unless the file system gives huge ones)
//   mmap+populate the mapping made with MAP_POPULATE (page tables filled at mmap time; that
//                 time is shown as setup)
//   pread         the batch's rows sorted by file offset; a run of adjacent rows is one call,
//                 scattered (preadv) straight into the rows' batch positions; the kernel
//                 copies through its own direct map (huge pages), so the user-space TLB cost
//                 of a 4 KB mapping disappears
//   ram (huge)    a private copy in anonymous memory on 2 MB pages (MADV_HUGEPAGE): the RAM
//                 cache's layout. Setup = reading the file into it.
//   shm (tmpfs)   a copy in a memfd (the page kind of a /dev/shm file): the shm cache's layout
// Every candidate gathers into the same pre-touched huge-page batch buffers, so the source
// side is the only difference. Each is timed for its first epoch (fresh mapping or fresh
// memory: page-table faults and first touch included, as in a new process) and its next ones.
// Before them: the memcpy ceiling of the same bytes on the same threads, and the first-touch
// cost of a fresh batch buffer (what every new loader paid before the process-wide pool).
//
// --drop-caches (root) drops the page cache before each candidate, so its first epoch also
// reads the disk; without it the file stays in the page cache and first epochs show the
// page-table and first-touch costs alone.
#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/row_gather.h"
#include "core/system/proc_text.h"
#include "gpufeed/file.h"
#include "sources/numpy/npy_header.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHugePage = size_t{2} << 20;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Rows {
  std::string path;
  uint64_t offset = 0;
  size_t row_bytes = 0;
  int64_t rows = 0;
};

Rows FromNpy(const std::string& dir, const std::string& field) {
  const std::string path = (std::filesystem::path(dir) / (field + ".npy")).string();
  auto file = gpufeed::DefaultFileSystem()->Open(path);
  const gpufeed::NpyHeader h = gpufeed::ReadNpyHeader(*file);
  size_t row = gpufeed::DTypeSize(h.dtype);
  for (size_t d = 1; d < h.shape.size(); ++d) row *= static_cast<size_t>(h.shape[d]);
  return {path, h.data_offset, row, h.shape[0]};
}

Rows FromHdf5(const std::string& path, const std::string& dataset) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + path);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("no dataset " + dataset + " in " + path);
  const haddr_t at = H5Dget_offset(d);
  if (at == HADDR_UNDEF) throw std::runtime_error(dataset + " is not contiguous and allocated");
  const hid_t space = H5Dget_space(d);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  const hid_t type = H5Dget_type(d);
  size_t row = H5Tget_size(type);
  for (int i = 1; i < rank; ++i) row *= dims[static_cast<size_t>(i)];
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return {path, at, row, static_cast<int64_t>(dims[0])};
}

// 2 MB-aligned memory on huge pages where the kernel gives them; touched when `touch`.
std::byte* HugeAlloc(size_t bytes, bool touch) {
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  madvise(p, rounded, MADV_HUGEPAGE);
  if (touch) std::memset(p, 0, rounded);
  return static_cast<std::byte*>(p);
}

// One batch: its rows in plan order, and the positions sorted by row (what the sources do).
struct Batch {
  std::vector<int64_t> rows;
  std::vector<uint32_t> order;
};

std::vector<Batch> Plan(int64_t rows, int64_t batch, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(rows));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<Batch> out;
  for (int64_t at = 0; at < rows; at += batch) {
    Batch b;
    b.rows.assign(perm.begin() + at, perm.begin() + std::min(rows, at + batch));
    b.order.resize(b.rows.size());
    std::iota(b.order.begin(), b.order.end(), 0u);
    std::sort(b.order.begin(), b.order.end(),
              [&](uint32_t x, uint32_t y) { return b.rows[x] < b.rows[y]; });
    out.push_back(std::move(b));
  }
  return out;
}

using GatherFn = std::function<void(const Batch&, std::byte* dst)>;

// Gathers every batch once on `threads` threads (batch i on thread i % threads, each writing
// its own buffers in turn); returns seconds.
double RunEpoch(const std::vector<Batch>& plan, int threads, std::vector<std::byte*>& buffers,
                const GatherFn& gather) {
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  const size_t per_thread = buffers.size() / static_cast<size_t>(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      size_t turn = 0;
      for (size_t b = static_cast<size_t>(t); b < plan.size(); b += static_cast<size_t>(threads)) {
        gather(plan[b], buffers[static_cast<size_t>(t) * per_thread + turn++ % per_thread]);
      }
    });
  }
  for (auto& th : pool) th.join();
  return Since(t0);
}

// The sources' own copy loop (CopyRows: the pages of the row a few rows ahead prefetched),
// or with `plain` a memcpy per row and nothing prefetched (the loop before CopyRows).
void GatherFrom(const std::byte* base, size_t rb, const Batch& b, std::byte* dst,
                bool plain = false) {
  if (plain) {
    for (const uint32_t pos : b.order) {
      std::memcpy(dst + pos * rb, base + static_cast<size_t>(b.rows[pos]) * rb, rb);
    }
    return;
  }
  gpufeed::CopyRows(
      b.order.size(), rb,
      [&](size_t i) { return base + static_cast<size_t>(b.rows[b.order[i]]) * rb; },
      [&](size_t i) { return dst + size_t{b.order[i]} * rb; });
}

// The pread candidate: sorted rows, a run of adjacent rows one call, scattered with preadv.
void GatherPread(int fd, uint64_t offset, size_t rb, const Batch& b, std::byte* dst) {
  const size_t n = b.order.size();
  std::vector<iovec> iov;
  size_t k = 0;
  while (k < n) {
    const int64_t first = b.rows[b.order[k]];
    size_t end = k + 1;
    while (end < n && end - k < IOV_MAX &&
           b.rows[b.order[end]] == first + static_cast<int64_t>(end - k)) {
      ++end;
    }
    const off_t at = static_cast<off_t>(offset + static_cast<uint64_t>(first) * rb);
    ssize_t got;
    if (end - k == 1) {
      got = pread(fd, dst + b.order[k] * rb, rb, at);
    } else {
      iov.clear();
      for (size_t j = k; j < end; ++j) iov.push_back({dst + b.order[j] * rb, rb});
      got = preadv(fd, iov.data(), static_cast<int>(iov.size()), at);
    }
    if (got != static_cast<ssize_t>((end - k) * rb)) throw std::runtime_error("short read");
    k = end;
  }
}

void DropCaches() {
  sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Gathering shuffled rows from a file: mapping, pread, huge pages, RAM, shm");
  std::string path;
  std::string field = "mel";
  int64_t batch = 8192;
  int threads = 2;
  int epochs = 2;
  uint64_t seed = 0;
  bool drop = false;
  app.add_option("--path", path, "NumPy folder or HDF5 file")->required();
  app.add_option("--field", field, "Field (.npy name or HDF5 dataset path)");
  app.add_option("--batch", batch, "Rows per batch");
  app.add_option("--threads", threads, "Gathering threads (the loader's workers)");
  app.add_option("--epochs", epochs, "Epochs per candidate (the first is shown apart)");
  app.add_option("--seed", seed, "Shuffle seed");
  app.add_flag("--drop-caches", drop, "Drop the page cache before each candidate (root)");
  CLI11_PARSE(app, argc, argv);
  threads = std::max(1, threads);
  epochs = std::max(2, epochs);

  const bool is_dir = std::filesystem::is_directory(path);
  const Rows rows = is_dir ? FromNpy(path, field) : FromHdf5(path, field);
  const size_t rb = rows.row_bytes;
  const size_t total = rb * static_cast<size_t>(rows.rows);
  const std::vector<Batch> plan = Plan(rows.rows, batch, seed);
  const size_t batch_bytes = rb * static_cast<size_t>(batch);
  fmt::print("{}: {} rows of {} B at offset {} ({:.0f} MB), batch {}, {} threads, {} epochs\n",
             rows.path, rows.rows, rb, rows.offset, total / 1e6, batch, threads, epochs);

  // First touch of a fresh batch buffer: what each new loader paid per buffer.
  {
    auto t0 = Clock::now();
    std::byte* fresh = HugeAlloc(batch_bytes, true);
    const double huge_s = Since(t0);
    std::free(fresh);
    t0 = Clock::now();
    auto* small =
        static_cast<std::byte*>(std::aligned_alloc(4096, (batch_bytes + 4095) / 4096 * 4096));
    madvise(small, (batch_bytes + 4095) / 4096 * 4096, MADV_NOHUGEPAGE);
    std::memset(small, 0, batch_bytes);
    const double small_s = Since(t0);
    std::free(small);
    fmt::print(
        "first touch of a fresh {:.0f} MB batch buffer: {:.3f} s on huge pages ({:.2f} "
        "GB/s), {:.3f} s on 4 KB pages ({:.2f} GB/s)\n",
        batch_bytes / 1e6, huge_s, batch_bytes / huge_s / 1e9, small_s,
        batch_bytes / small_s / 1e9);
  }

  std::vector<std::byte*> buffers(static_cast<size_t>(threads) * 3);
  for (auto& b : buffers) b = HugeAlloc(batch_bytes, true);

  // The memcpy ceiling: the same bytes in row-sized copies from a sequential huge-page array.
  {
    std::byte* src = HugeAlloc(std::min(total, size_t{256} << 20), true);
    const size_t src_rows = std::min(total, size_t{256} << 20) / rb;
    const double s = RunEpoch(plan, threads, buffers, [&](const Batch& b, std::byte* dst) {
      for (size_t i = 0; i < b.rows.size(); ++i) {
        std::memcpy(dst + i * rb, src + (i % src_rows) * rb, rb);
      }
    });
    fmt::print("{:<14} {:>8} {:>10.2f} GB/s (sequential memcpy of the same bytes)\n", "ceiling", "",
               total / s / 1e9);
    std::free(src);
  }
  fmt::print("{:<14} {:>8} {:>15} {:>15}  (GB/s of rows gathered)\n", "candidate", "setup s",
             "first epoch", "later epochs");

  std::vector<std::byte> reference(std::min<size_t>(batch_bytes, plan[0].rows.size() * rb));
  bool have_reference = false;
  auto report = [&](const char* name, double setup_s, const GatherFn& gather) {
    const double first = RunEpoch(plan, threads, buffers, gather);
    double later = 0;
    for (int e = 1; e < epochs; ++e) later += RunEpoch(plan, threads, buffers, gather);
    later /= (epochs - 1);
    // Every candidate must give the same bytes: batch 0 against the first candidate's.
    std::vector<std::byte> check(reference.size());
    gather(plan[0], check.data());
    if (!have_reference) {
      reference = check;
      have_reference = true;
    }
    const bool same = check == reference;
    fmt::print("{:<14} {:>8.3f} {:>10.2f} GB/s {:>10.2f} GB/s{}\n", name, setup_s,
               total / first / 1e9, total / later / 1e9, same ? "" : "  WRONG BYTES");
  };

  const int fd = open(rows.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + rows.path);
  const size_t map_bytes = rows.offset + total;
  // How much of the candidate's mapping (the only file mapping alive) the kernel mapped whole.
  const auto print_pmd_mapped = [] {
    fmt::print("{:<14} {:>8} {:.0f} MB of the mapping in 2 MiB pages\n", "", "",
               static_cast<double>(gpufeed::ProcessFilePmdMappedBytes().value_or(0)) / 1e6);
  };
  auto mapped = [&](const char* name, int flags, bool advise, bool touch = false,
                    bool populate_read = false, bool plain = false) {
    if (drop) DropCaches();
    const auto t0 = Clock::now();
    void* p = mmap(nullptr, map_bytes, PROT_READ, MAP_SHARED | flags, fd, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    if (advise) {
      madvise(p, map_bytes, MADV_HUGEPAGE);
      madvise(p, map_bytes, MADV_WILLNEED);
    }
    if (populate_read && madvise(p, map_bytes, MADV_POPULATE_READ) != 0) {
      fmt::print("MADV_POPULATE_READ refused: {}\n", std::strerror(errno));
    }
    if (touch) {  // one read per 4 KB page: page tables filled before the first epoch
      unsigned char sum = 0;
      for (size_t at = 0; at < map_bytes; at += 4096) {
        sum = static_cast<unsigned char>(sum + static_cast<const volatile unsigned char*>(p)[at]);
      }
      volatile unsigned char sink = sum;
      (void)sink;
    }
    const double setup = Since(t0);
    const auto* base = static_cast<const std::byte*>(p) + rows.offset;
    report(name, setup,
           [&](const Batch& b, std::byte* dst) { GatherFrom(base, rb, b, dst, plain); });
    print_pmd_mapped();
    munmap(p, map_bytes);
  };
  mapped("mmap", 0, false);
  mapped("mmap, plain", 0, false, false, false, true);
  mapped("mmap+advise", 0, true);
  mapped("mmap+populate", MAP_POPULATE, false);
  mapped("mmap+touch", 0, false, true);
  mapped("mmap+pop_read", 0, false, false, true);
  {
    // The sources' mapping (gpufeed::File::Map): at a 2 MiB boundary with MADV_HUGEPAGE, and
    // a page cache in small folios dropped once to be read back in 2 MiB folios. Last of
    // the mapping candidates: that drop changes the page cache the others would see.
    if (drop) DropCaches();
    const auto t0 = Clock::now();
    const auto file = gpufeed::DefaultFileSystem()->Open(rows.path);
    const std::byte* p = file->Map();
    if (p == nullptr) throw std::runtime_error("cannot map " + rows.path);
    file->PreferHugePages(rows.offset, total);
    const double setup = Since(t0);
    report("File::Map", setup,
           [&](const Batch& b, std::byte* dst) { GatherFrom(p + rows.offset, rb, b, dst); });
    print_pmd_mapped();
  }
  if (drop) DropCaches();
  report("pread", 0,
         [&](const Batch& b, std::byte* dst) { GatherPread(fd, rows.offset, rb, b, dst); });
  {
    if (drop) DropCaches();
    const auto t0 = Clock::now();
    std::byte* ram = HugeAlloc(total, false);
    for (size_t at = 0; at < total; at += size_t{64} << 20) {
      const size_t n = std::min(total - at, size_t{64} << 20);
      if (pread(fd, ram + at, n, static_cast<off_t>(rows.offset + at)) != static_cast<ssize_t>(n)) {
        throw std::runtime_error("short read");
      }
    }
    report("ram (huge)", Since(t0),
           [&](const Batch& b, std::byte* dst) { GatherFrom(ram, rb, b, dst); });
    std::free(ram);
  }
  {
    if (drop) DropCaches();
    const auto t0 = Clock::now();
    const int mfd = memfd_create("stream_gather", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, static_cast<off_t>(total)) != 0) {
      throw std::runtime_error("memfd failed");
    }
    auto* shm =
        static_cast<std::byte*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0));
    for (size_t at = 0; at < total; at += size_t{64} << 20) {
      const size_t n = std::min(total - at, size_t{64} << 20);
      if (pread(fd, shm + at, n, static_cast<off_t>(rows.offset + at)) != static_cast<ssize_t>(n)) {
        throw std::runtime_error("short read");
      }
    }
    // A reader maps the published file afresh, as another process would.
    munmap(shm, total);
    const auto* view =
        static_cast<const std::byte*>(mmap(nullptr, total, PROT_READ, MAP_SHARED, mfd, 0));
    report("shm (tmpfs)", Since(t0),
           [&](const Batch& b, std::byte* dst) { GatherFrom(view, rb, b, dst); });
    munmap(const_cast<std::byte*>(view), total);
    close(mfd);
  }
  close(fd);
  for (auto* b : buffers) std::free(b);
  return 0;
}
