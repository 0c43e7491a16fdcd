// Rewrites an HDF5 file so that every dataset is chunked in whole samples along axis 0: the
// layout gpufeed (and any reader that takes samples at random) reads fastest. A file written
// with h5py's `chunks=True` can cut one sample into hundreds of small chunks; after the
// rewrite one sample is one contiguous piece of one chunk.
//
// The rewrite goes through libhdf5, so h5py, libhdf5 and gpufeed all read the result. It
// keeps the groups, attributes, dtypes, fill values, soft and external links, and hard links
// that name one object twice; scalar datasets, datasets of one empty fixed row count and
// named datatypes are copied as they are (H5Ocopy). The input passes gpufeed's own structure
// checks before libhdf5 opens it. The output is written under a temporary name in the target's
// folder, checked (a sample of rows of every rewritten dataset compared byte for byte with the
// input), then renamed into place: an error, a full disk or a cancellation leaves nothing
// behind.
//
// Thread-safety: one call at a time per output; takes the libhdf5 lock for each libhdf5 call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpufeed {

struct RechunkOptions {
  std::string input;
  std::string output;
  // Default: 0 = about 1 MiB of samples per chunk (at least one sample, at most the rows).
  int64_t samples_per_chunk = 0;
  // Default: "keep" = each dataset's own filters. "none", "gzip" or "gzip:L" (with the
  // shuffle filter), "lz4", "zstd" or "zstd:L" (the last two need their HDF5 filter plugins
  // at write time, as h5py with hdf5plugin writes them).
  std::string compression = "keep";
  bool force = false;  // Default: false: an existing output is refused
  // Default: 64: rows compared per rewritten dataset after the write (first, last, and an
  // even spread between).
  int64_t verify_rows = 64;
};

struct RechunkDataset {
  std::string path;             // "/mel"
  std::vector<int64_t> chunks;  // the new chunk shape
  std::string how;              // "rechunked", or "copied as is: <why>"
};

struct RechunkReport {
  std::vector<RechunkDataset> datasets;
  uint64_t bytes_copied = 0;  // dataset bytes rewritten
  int64_t rows_verified = 0;
  // What was left out, and why (object references, which point into the input file; links
  // of user-defined classes).
  std::vector<std::string> notes;
};

// `progress(done_bytes, total_bytes)` is called after each slab written.
using RechunkProgress = std::function<void(uint64_t, uint64_t)>;

// Throws Error: kInvalidArgument (bad options, output exists without force, output is the
// input), kNotFound (no input), kCorruptData (input refused by gpufeed's checks, or a
// verification mismatch), kIo (the write failed: full disk, no permission), kCancelled (the
// calling thread's CancelToken), kUnsupported (a compression whose filter is unavailable).
RechunkReport RechunkHdf5(const RechunkOptions& options, const RechunkProgress& progress = {});

}  // namespace gpufeed
