// The demo data set: log-mel-like segments float32[1,64,32] with an int64 label. Each class
// lights up its own band of mel bins over noise, so a small CNN can learn it
// (examples/train_mel.py). Two forms: one HDF5 file in the layout h5py gives a user who asks
// for chunks (`chunks=True`, as any compressed or resizable dataset has: its guess_chunk
// shape), which is what `gpufeed demo` reads by default; and NumPy files in a folder (`gpufeed
// demo --format npy`, the set the README's benchmarks use). Both are written atomically: into
// a temporary name renamed when complete, so an interrupted run never leaves half a set.
// Thread-safety: one call at a time per folder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpufeed::cli {

inline constexpr int kDemoClasses = 10;

// $XDG_CACHE_HOME/gpufeed/demo-mel, else ~/.cache/gpufeed/demo-mel.
std::string DefaultDemoFolder();
// $XDG_CACHE_HOME/gpufeed/demo-mel.h5, else ~/.cache/gpufeed/demo-mel.h5.
std::string DefaultDemoFile();

// The chunk shape h5py picks for `shape` with chunks=True (h5py/_hl/filters.py guess_chunk:
// halve the axes in turn until a chunk is near a target size that grows with the data set,
// 8 KiB to 1 MiB). For the demo's [100000, 1, 64, 32] float32: [3125, 1, 4, 2].
std::vector<int64_t> H5pyGuessChunk(const std::vector<int64_t>& shape, size_t element_size);

// True when `folder` holds a complete demo set of `samples` samples.
bool DemoSetExists(const std::string& folder, int64_t samples);

// Writes mel.npy and label.npy; `on_progress(fraction)` is called as it goes.
// Throws Error(kIo) naming the path when the disk fails.
void MakeDemoSet(const std::string& folder, int64_t samples,
                 const std::function<void(double)>& on_progress);

// True when `path` is an HDF5 demo set of `samples` samples in h5py's chunked layout.
bool DemoHdf5Exists(const std::string& path, int64_t samples);

// Writes datasets `mel` and `label` (the same values as MakeDemoSet) into one HDF5 file,
// chunked as H5pyGuessChunk says, uncompressed, in the earliest file format (h5py's default).
// Throws Error(kIo) naming the path when libhdf5 or the disk fails.
void MakeDemoHdf5(const std::string& path, int64_t samples,
                  const std::function<void(double)>& on_progress);

}  // namespace gpufeed::cli
