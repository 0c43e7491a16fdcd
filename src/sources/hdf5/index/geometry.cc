#include "sources/hdf5/index/geometry.h"

#include <algorithm>

namespace gpufeed {

Hdf5ChunkGeometry::Hdf5ChunkGeometry(const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& chunk_dims, size_t element_size)
    : samples_per_chunk_(chunk_dims.empty() ? 1 : chunk_dims[0]) {
  // Axes 1.. only: the per-sample shape D and the chunk's extent C along it.
  const std::vector<int64_t> d(dims.begin() + 1, dims.end());
  const std::vector<int64_t> c(chunk_dims.begin() + 1, chunk_dims.end());
  const size_t k = d.size();
  std::vector<size_t> c_stride(k, 1), d_stride(k, 1);
  for (size_t i = k; i-- > 1;) {
    c_stride[i - 1] = c_stride[i] * static_cast<size_t>(c[i]);
    d_stride[i - 1] = d_stride[i] * static_cast<size_t>(d[i]);
  }
  slab_bytes_ = element_size;
  std::vector<int64_t> grid(k);
  size_t columns = 1;
  for (size_t i = 0; i < k; ++i) {
    slab_bytes_ *= static_cast<size_t>(c[i]);
    grid[i] = c[i] == 0 ? 0 : (d[i] + c[i] - 1) / c[i];
    columns *= static_cast<size_t>(grid[i]);
  }
  if (const auto runs = CountRuns(dims, chunk_dims)) runs_.reserve(*runs);
  column_start_.reserve(columns + 1);
  column_start_.push_back(0);
  std::vector<int64_t> g(k, 0);  // this column's grid position
  std::vector<int64_t> start(k), extent(k), p(k);
  for (size_t col = 0; col < columns; ++col) {
    for (size_t i = 0; i < k; ++i) {
      start[i] = g[i] * c[i];
      extent[i] = std::min(c[i], d[i] - start[i]);
    }
    // Merge trailing axes that the piece covers whole in both the chunk and the sample: the
    // run spans them, and the loop below walks only axes [0, inner).
    size_t inner = k;
    size_t run_elems = 1;
    while (inner > 0) {
      const size_t i = inner - 1;
      run_elems *= static_cast<size_t>(extent[i]);
      --inner;
      if (!(extent[i] == c[i] && extent[i] == d[i])) break;
    }
    std::fill(p.begin(), p.end(), 0);
    bool empty = run_elems == 0;
    for (size_t i = 0; i < inner; ++i) empty = empty || extent[i] == 0;
    while (!empty) {
      size_t src = 0, dst = 0;
      for (size_t i = 0; i < inner; ++i) {
        src += static_cast<size_t>(p[i]) * c_stride[i];
        dst += static_cast<size_t>(start[i] + p[i]) * d_stride[i];
      }
      for (size_t i = inner; i < k; ++i) dst += static_cast<size_t>(start[i]) * d_stride[i];
      runs_.push_back({src * element_size, dst * element_size, run_elems * element_size});
      size_t i = inner;
      while (i > 0) {
        --i;
        if (++p[i] < extent[i]) break;
        p[i] = 0;
        if (i == 0) empty = true;
      }
      if (inner == 0) break;
    }
    column_start_.push_back(runs_.size());
    for (size_t i = k; i-- > 0;) {  // next column, row-major
      if (++g[i] < grid[i]) break;
      g[i] = 0;
    }
  }
}

std::optional<uint64_t> Hdf5ChunkGeometry::CountRuns(const std::vector<int64_t>& dims,
                                                     const std::vector<int64_t>& chunk_dims) {
  // Trailing axes the chunk covers whole (chunk extent == sample extent) merge into the run
  // together with the first axis that differs, j; every column then holds one run per
  // position over axes [0, j) of its piece, and the pieces of all columns tile the sample
  // along those axes. In all: prod(D[0..j)) runs per grid position along axis j.
  const size_t k = dims.size() - 1;
  size_t j = k;
  while (j > 0 && dims[j] == chunk_dims[j]) --j;  // axis j (1-based in dims) differs or j = 0
  if (j == 0) return 1;
  uint64_t runs = 1;
  for (size_t i = 1; i < j; ++i) {
    if (__builtin_mul_overflow(runs, static_cast<uint64_t>(dims[i]), &runs)) return std::nullopt;
  }
  const auto d = static_cast<uint64_t>(dims[j]);
  const auto c = static_cast<uint64_t>(chunk_dims[j]);
  const uint64_t grid = d / c + (d % c != 0 ? 1 : 0);
  if (__builtin_mul_overflow(runs, grid, &runs)) return std::nullopt;
  return runs;
}

}  // namespace gpufeed
