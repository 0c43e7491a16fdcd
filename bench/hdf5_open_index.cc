// Prints how long opening one dataset of an HDF5 file takes (the chunk index read at open),
// which index reader ran, and optionally dumps every sample's bytes (little-endian, C order)
// for comparison with h5py: bench_hdf5_open_index FILE DATASET [--dump OUT].
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <vector>

#include "gpufeed/hdf5.h"
#include "sources/hdf5/tools/inspect.h"

int main(int argc, char** argv) {
  CLI::App app("Time an HDF5 dataset's open (its chunk index read)");
  std::string path, dataset, dump;
  app.add_option("file", path)->required();
  app.add_option("dataset", dataset)->required();
  app.add_option("--dump", dump, "write every sample's bytes here");
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  auto source = gpufeed::OpenHdf5({path}, {dataset});
  const double open_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("open: %.3f s, %lld samples\n", open_s, static_cast<long long>(source->size()));
  for (const auto& d : gpufeed::InspectHdf5(path).datasets) {
    if (d.dataset == dataset || d.dataset == "/" + dataset) {
      std::printf("index: %s, %lld chunks stored, read in %.3f s\n", d.index_method.c_str(),
                  static_cast<long long>(d.chunks_stored), d.index_seconds);
    }
  }
  if (dump.empty()) return 0;
  const size_t sample = source->schema().fields[0].SampleBytes();
  std::vector<int64_t> idx(source->size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  std::vector<std::byte> out(idx.size() * sample);
  gpufeed::BatchView view;
  view.rows = static_cast<int64_t>(idx.size());
  view.fields.push_back(out.data());
  auto state = source->NewWorkerState();
  source->Read(idx, view, state.get());
  std::ofstream(dump, std::ios::binary).write(reinterpret_cast<const char*>(out.data()),
                                              static_cast<std::streamsize>(out.size()));
  return 0;
}
