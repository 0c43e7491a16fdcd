// Where a sample's bytes lie inside the chunks of a chunked dataset.
//
// Chunks tile every axis, not only axis 0 (h5py's chunks=True picks a chunk shape over all
// axes), so one sample may span several chunks. A chunk "row" is the set of chunks that share
// a position along axis 0; within it, each "column" (a position along the other axes) holds
// one rectangular piece of every sample of the row. For each column, CopyRuns lists the
// contiguous byte runs that move that piece from the chunk into the output row; adjacent
// axes the chunk and the sample both cover whole are merged into one run.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gpufeed {

struct Hdf5CopyRun {
  size_t src = 0;  // bytes from the start of the sample's slab within the chunk
  size_t dst = 0;  // bytes from the start of the sample's output row
  size_t len = 0;
};

class Hdf5ChunkGeometry {
 public:
  Hdf5ChunkGeometry() = default;
  // `dims` and `chunk_dims`: the full dataset shape and chunk shape (samples first).
  // REQUIRES: shapes checked at open (OpenHdf5Dataset): chunk extents >= 1, a chunk below
  // 4 GiB, a sample's byte count within 64 bits, CountRuns within its cap.
  Hdf5ChunkGeometry(const std::vector<int64_t>& dims, const std::vector<int64_t>& chunk_dims,
                    size_t element_size);

  // How many copy runs the geometry of these shapes holds over all columns, computed without
  // building it; nullopt when the count does not fit in 64 bits. REQUIRES: chunk extents >= 1.
  static std::optional<uint64_t> CountRuns(const std::vector<int64_t>& dims,
                                           const std::vector<int64_t>& chunk_dims);

  int64_t samples_per_chunk() const { return samples_per_chunk_; }
  // Chunks per chunk row (the product of the grid over axes 1..).
  size_t columns() const { return column_start_.empty() ? 0 : column_start_.size() - 1; }
  // Bytes of one sample's slab in a chunk: the chunk shape without axis 0.
  size_t slab_bytes() const { return slab_bytes_; }
  std::span<const Hdf5CopyRun> runs(size_t column) const {
    return {runs_.data() + column_start_[column], runs_.data() + column_start_[column + 1]};
  }

 private:
  int64_t samples_per_chunk_ = 1;
  size_t slab_bytes_ = 0;
  // All columns' runs in one table (a crafted shape may cut a sample into millions of
  // one-element pieces: one allocation, not one per column); column c's runs are
  // runs_[column_start_[c], column_start_[c + 1]).
  std::vector<Hdf5CopyRun> runs_;
  std::vector<size_t> column_start_;
};

}  // namespace gpufeed
