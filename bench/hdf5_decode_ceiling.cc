// The decode ceiling of compressed HDF5 datasets: every stored chunk decoded once, by N
// threads, with the library gpufeed uses (the same DecodeHdf5Chunk), no gather and no reads
// (the raw chunks are loaded into memory first). Prints one JSON line: chunks, decoded bytes,
// seconds and samples per second (the datasets' samples over the decode time).
//
//   bench_hdf5_decode_ceiling FILE --dataset mel --dataset label --threads 2 [--zlib]
//
// --zlib inflates deflate chunks with zlib instead of libdeflate (GPUFEED_HDF5_INFLATE=zlib).
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "gpufeed/file.h"
#include "sources/hdf5/filters/codecs.h"
#include "sources/hdf5/filters/filters.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/dataset.h"

namespace {

struct Job {
  const gpufeed::Hdf5Dataset* ds;
  std::vector<std::byte> raw;
  uint32_t mask;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode ceiling of compressed HDF5 datasets"};
  std::string path;
  std::vector<std::string> names;
  int threads = 2;
  bool zlib = false;
  app.add_option("file", path)->required();
  app.add_option("--dataset", names)->required();
  app.add_option("--threads", threads);
  app.add_flag("--zlib", zlib);
  CLI11_PARSE(app, argc, argv);
  gpufeed::SetHdf5InflateWithZlib(zlib);

  std::shared_ptr<const gpufeed::File> file = gpufeed::DefaultFileSystem()->Open(path);
  std::vector<gpufeed::Hdf5Dataset> datasets;
  {
    gpufeed::Hdf5Lock lock;
    gpufeed::Hdf5Id h5 = gpufeed::OpenHdf5File(file);
    for (const auto& n : names) datasets.push_back(gpufeed::OpenHdf5Dataset(h5.get(), *file, n));
  }
  std::vector<Job> jobs;
  uint64_t decoded_bytes = 0;
  for (const auto& ds : datasets) {
    for (const auto& [linear, c] : ds.chunks.stored()) {
      if (c.size == 0) continue;
      Job job{&ds, std::vector<std::byte>(c.size), c.filter_mask};
      size_t done = 0;
      while (done < c.size) {
        const size_t got = file->ReadAt(c.address + done, job.raw.data() + done, c.size - done);
        if (got == 0) {
          std::fprintf(stderr, "%s changed size while being read\n", path.c_str());
          return 1;
        }
        done += got;
      }
      jobs.push_back(std::move(job));
      decoded_bytes += ds.ChunkBytes();
    }
  }
  std::atomic<size_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<std::byte> out, scratch;
      for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
        const Job& j = jobs[i];
        out.resize(j.ds->ChunkBytes());
        gpufeed::DecodeHdf5Chunk(j.raw, j.ds->filters, j.mask, j.ds->element_size, out, scratch);
      }
    });
  }
  for (auto& t : pool) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t samples = datasets.empty() ? 0 : datasets.front().samples;
  std::printf(
      "{\"chunks\": %zu, \"decoded_bytes\": %llu, \"seconds\": %.6f, \"threads\": %d, "
      "\"samples\": %lld, \"samples_per_s\": %.1f, \"inflate\": \"%s\"}\n",
      jobs.size(), static_cast<unsigned long long>(decoded_bytes), seconds, threads,
      static_cast<long long>(samples), static_cast<double>(samples) / seconds,
      zlib ? "zlib" : "libdeflate");
  return 0;
}
