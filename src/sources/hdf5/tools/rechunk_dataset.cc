// One dataset of `gpufeed rechunk`: its new creation property list (whole-sample chunks, the
// fill value, the filters asked for), its rows copied slab by slab with no conversion (the
// file's own type is the memory type), its attributes, and the check of the written file.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/tools/rechunk_copy.h"

namespace gpufeed {
namespace {

constexpr uint64_t kTargetChunkBytes = 1 << 20;
constexpr uint64_t kSlabBytes = 64 << 20;
constexpr uint64_t kMaxChunkBytes = (uint64_t{1} << 32) - 1;  // HDF5's limit on a chunk
constexpr H5Z_filter_t kLz4Filter = 32004;
constexpr H5Z_filter_t kZstdFilter = 32015;

// The shape of a dataset: its dims and maxdims, and the bytes of one row (one sample).
struct Shape {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> maxdims;
  uint64_t row_bytes = 0;
};

Shape ShapeOf(hid_t space, hid_t type, const std::string& path) {
  Shape shape;
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) ThrowRechunkError(ErrorCode::kCorruptData, path);
  shape.dims.resize(static_cast<size_t>(rank));
  shape.maxdims.resize(static_cast<size_t>(rank));
  if (rank > 0) {
    H5Sget_simple_extent_dims(space, shape.dims.data(), shape.maxdims.data());
  }
  uint64_t row = H5Tget_size(type);
  for (size_t d = 1; d < shape.dims.size(); ++d) {
    row = MulOrThrow(row, shape.dims[d], fmt::format("{}: bytes of one row", path));
  }
  shape.row_bytes = row;
  return shape;
}

// Reads and writes slabs of whole rows through a hyperslab of both files.
void SelectRows(hid_t space, const Shape& shape, hsize_t first, hsize_t rows) {
  std::vector<hsize_t> start(shape.dims.size(), 0);
  std::vector<hsize_t> count = shape.dims;
  start[0] = first;
  count[0] = rows;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
}

Hdf5Id RowsMemorySpace(const Shape& shape, hsize_t rows) {
  std::vector<hsize_t> count = shape.dims;
  count[0] = rows;
  return Hdf5Id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
}

void AddFilter(hid_t dcpl, const Hdf5Compression& compression, const std::string& path) {
  using Kind = Hdf5Compression::Kind;
  herr_t status = 0;
  if (compression.kind == Kind::kGzip) {
    status = H5Pset_shuffle(dcpl) < 0 ? -1 : H5Pset_deflate(dcpl, compression.level);
  } else if (compression.kind == Kind::kLz4 || compression.kind == Kind::kZstd) {
    const H5Z_filter_t id = compression.kind == Kind::kLz4 ? kLz4Filter : kZstdFilter;
    if (H5Zfilter_avail(id) <= 0) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("rechunk: {}: libhdf5 has no plugin for filter {} ({}); install "
                              "the HDF5 filter plugins (Debian: hdf5-filter-plugin) or pick "
                              "gzip",
                              path, id, compression.kind == Kind::kLz4 ? "LZ4" : "Zstd"));
    }
    const unsigned level = static_cast<unsigned>(compression.level);
    status = H5Pset_filter(dcpl, id, H5Z_FLAG_MANDATORY, compression.kind == Kind::kZstd, &level);
  }
  CheckRechunkStatus(status, ErrorCode::kIo, fmt::format("{}: setting the compression", path));
}

// The input's filters, in order, as they were (their set_local callbacks redo the parameters
// that depend on the chunk shape).
void KeepFilters(hid_t dcpl, hid_t src_dcpl, const std::string& path) {
  const int filters = H5Pget_nfilters(src_dcpl);
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    unsigned config = 0;
    size_t values = 32;
    unsigned cd[32] = {};
    char name[64] = {};
    const H5Z_filter_t id = H5Pget_filter2(src_dcpl, static_cast<unsigned>(i), &flags, &values, cd,
                                           sizeof(name), name, &config);
    if (id < 0 || values > 32) ThrowRechunkError(ErrorCode::kCorruptData, path + ": its filters");
    if (H5Zfilter_avail(id) <= 0) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("rechunk: {}: libhdf5 has no plugin to write filter {} ('{}'); "
                              "install one or pass --compression none|gzip",
                              path, id, name));
    }
    CheckRechunkStatus(H5Pset_filter(dcpl, id, flags, values, cd), ErrorCode::kIo,
                       fmt::format("{}: keeping filter {}", path, id));
  }
}

}  // namespace

hid_t Hdf5TreeCopier::NewCreateList(hid_t src_dataset, hid_t type,
                                    const std::vector<hsize_t>& chunks, const std::string& path) {
  Hdf5Id src_dcpl(CheckRechunkId(H5Dget_create_plist(src_dataset), ErrorCode::kCorruptData, path));
  Hdf5Id dcpl(CheckRechunkId(H5Pcreate(H5P_DATASET_CREATE), ErrorCode::kIo, path));
  CheckRechunkStatus(H5Pset_chunk(dcpl.get(), static_cast<int>(chunks.size()), chunks.data()),
                     ErrorCode::kIo, path + ": setting the chunks");
  H5D_fill_value_t defined = H5D_FILL_VALUE_UNDEFINED;
  H5Pfill_value_defined(src_dcpl.get(), &defined);
  if (defined == H5D_FILL_VALUE_USER_DEFINED) {
    std::vector<std::byte> fill(H5Tget_size(type));
    CheckRechunkStatus(H5Pget_fill_value(src_dcpl.get(), type, fill.data()),
                       ErrorCode::kCorruptData, path + ": its fill value");
    CheckRechunkStatus(H5Pset_fill_value(dcpl.get(), type, fill.data()), ErrorCode::kIo, path);
  }
  H5D_fill_time_t fill_time = H5D_FILL_TIME_IFSET;
  if (H5Pget_fill_time(src_dcpl.get(), &fill_time) >= 0) H5Pset_fill_time(dcpl.get(), fill_time);
  if (compression_.kind == Hdf5Compression::Kind::kKeep) {
    KeepFilters(dcpl.get(), src_dcpl.get(), path);
  } else {
    AddFilter(dcpl.get(), compression_, path);
  }
  const hid_t raw = dcpl.get();
  H5Iinc_ref(raw);  // the caller owns it
  return raw;
}

void Hdf5TreeCopier::CopyRows(hid_t src, hid_t dst, hid_t type, const std::vector<hsize_t>& dims,
                              hsize_t chunk_rows, const std::string& path) {
  Hdf5Id space_in(CheckRechunkId(H5Dget_space(src), ErrorCode::kCorruptData, path));
  Hdf5Id space_out(CheckRechunkId(H5Dget_space(dst), ErrorCode::kIo, path));
  Shape shape{dims, dims, 0};
  shape.row_bytes = ShapeOf(space_in.get(), type, path).row_bytes;
  const uint64_t chunk_bytes = chunk_rows * shape.row_bytes;
  const hsize_t slab_rows = chunk_rows * std::max<uint64_t>(1, kSlabBytes / chunk_bytes);
  std::vector<std::byte> buffer(static_cast<size_t>(
      MulOrThrow(std::min<hsize_t>(slab_rows, dims[0]), shape.row_bytes, path + ": a slab")));
  for (hsize_t first = 0; first < dims[0]; first += slab_rows) {
    ThrowIfCancelled("rechunk");
    const hsize_t rows = std::min(slab_rows, dims[0] - first);
    Hdf5Id memory = RowsMemorySpace(shape, rows);
    SelectRows(space_in.get(), shape, first, rows);
    SelectRows(space_out.get(), shape, first, rows);
    CheckRechunkStatus(H5Dread(src, type, memory.get(), space_in.get(), H5P_DEFAULT, buffer.data()),
                       ErrorCode::kCorruptData,
                       fmt::format("{}: reading rows {} to {}", path, first, first + rows));
    CheckRechunkStatus(
        H5Dwrite(dst, type, memory.get(), space_out.get(), H5P_DEFAULT, buffer.data()),
        ErrorCode::kIo, fmt::format("{}: writing rows {} to {}", path, first, first + rows));
    report_->bytes_copied += rows * shape.row_bytes;
    if (progress_) progress_(report_->bytes_copied, total_bytes_);
  }
}

void Hdf5TreeCopier::CopyDataset(hid_t src, hid_t dst, const std::string& name,
                                 const std::string& path) {
  Hdf5Id in(
      CheckRechunkId(H5Dopen2(src, name.c_str(), H5P_DEFAULT), ErrorCode::kCorruptData, path));
  Hdf5Id file_type(CheckRechunkId(H5Dget_type(in.get()), ErrorCode::kCorruptData, path));
  // A transient copy: a committed type of the input cannot name a type in the output.
  Hdf5Id type(CheckRechunkId(H5Tcopy(file_type.get()), ErrorCode::kCorruptData, path));
  Hdf5Id space(CheckRechunkId(H5Dget_space(in.get()), ErrorCode::kCorruptData, path));
  if (H5Tdetect_class(type.get(), H5T_REFERENCE) > 0) {
    report_->notes.push_back(
        fmt::format("{}: object references, not copied (they point into "
                    "the input file)",
                    path));
    return;
  }
  if (H5Tdetect_class(type.get(), H5T_VLEN) > 0 || H5Tis_variable_str(type.get()) > 0) {
    return CopyAsIs(src, dst, name, path, "variable-length data");
  }
  const Shape shape = ShapeOf(space.get(), type.get(), path);
  if (shape.dims.empty()) return CopyAsIs(src, dst, name, path, "a scalar");
  if (shape.row_bytes == 0 || shape.row_bytes > kMaxChunkBytes) {
    return CopyAsIs(src, dst, name, path, "one row is not a valid chunk");
  }
  hsize_t rows = options_.samples_per_chunk > 0
                     ? static_cast<hsize_t>(options_.samples_per_chunk)
                     : std::max<hsize_t>(1, kTargetChunkBytes / shape.row_bytes);
  rows = std::min<hsize_t>(rows, kMaxChunkBytes / shape.row_bytes);
  if (shape.maxdims[0] != H5S_UNLIMITED) rows = std::min(rows, shape.dims[0]);
  if (rows == 0) return CopyAsIs(src, dst, name, path, "no rows and a fixed size");
  std::vector<hsize_t> chunks = shape.dims;
  chunks[0] = rows;
  for (size_t d = 1; d < chunks.size(); ++d) chunks[d] = std::max<hsize_t>(chunks[d], 1);
  Hdf5Id dcpl(NewCreateList(in.get(), type.get(), chunks, path));
  // No chunk cache on the output: each slab's chunks are written by its H5Dwrite, so a
  // failed write (a full disk) fails there. Left in the cache, it would fail in H5Dclose,
  // which leaves libhdf5's id table damaged (Debian's 1.10.8 then crashes at exit).
  Hdf5Id dapl(CheckRechunkId(H5Pcreate(H5P_DATASET_ACCESS), ErrorCode::kIo, path));
  H5Pset_chunk_cache(dapl.get(), 0, 0, 1.0);
  Hdf5Id out(CheckRechunkId(
      H5Dcreate2(dst, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()),
      ErrorCode::kIo, path));
  CopyRows(in.get(), out.get(), type.get(), shape.dims, rows, path);
  CopyAttributes(in.get(), out.get(), path);
  report_->datasets.push_back(
      {path, std::vector<int64_t>(chunks.begin(), chunks.end()), "rechunked"});
}

namespace {

struct AttributeState {
  hid_t dst;
  std::string path;
  RechunkReport* report;
  std::exception_ptr error;
};

void CopyAttribute(hid_t src, const char* name, AttributeState& state) {
  const std::string what = fmt::format("{} attribute '{}'", state.path, name);
  Hdf5Id attribute(CheckRechunkId(H5Aopen(src, name, H5P_DEFAULT), ErrorCode::kCorruptData, what));
  Hdf5Id type(CheckRechunkId(H5Aget_type(attribute.get()), ErrorCode::kCorruptData, what));
  if (H5Tdetect_class(type.get(), H5T_REFERENCE) > 0) {
    state.report->notes.push_back(what + ": object references, not copied");
    return;
  }
  Hdf5Id memory(CheckRechunkId(H5Tget_native_type(type.get(), H5T_DIR_DEFAULT),
                               ErrorCode::kCorruptData, what));
  Hdf5Id space(CheckRechunkId(H5Aget_space(attribute.get()), ErrorCode::kCorruptData, what));
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (points < 0) ThrowRechunkError(ErrorCode::kCorruptData, what);
  std::vector<std::byte> buffer(static_cast<size_t>(MulOrThrow(static_cast<uint64_t>(points),
                                                               H5Tget_size(memory.get()), what)) +
                                1);
  CheckRechunkStatus(H5Aread(attribute.get(), memory.get(), buffer.data()), ErrorCode::kCorruptData,
                     what);
  Hdf5Id out(
      CheckRechunkId(H5Acreate2(state.dst, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                     ErrorCode::kIo, what));
  const herr_t written = H5Awrite(out.get(), memory.get(), buffer.data());
  if (H5Tdetect_class(memory.get(), H5T_VLEN) > 0 || H5Tis_variable_str(memory.get()) > 0) {
    H5Dvlen_reclaim(memory.get(), space.get(), H5P_DEFAULT, buffer.data());
  }
  CheckRechunkStatus(written, ErrorCode::kIo, what);
}

herr_t VisitAttribute(hid_t src, const char* name, const H5A_info_t*, void* data) {
  auto* state = static_cast<AttributeState*>(data);
  try {
    CopyAttribute(src, name, *state);
    return 0;
  } catch (...) {
    state->error = std::current_exception();
    return -1;
  }
}

herr_t AddDatasetBytes(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  Hdf5Id dataset(H5Dopen2(root, name, H5P_DEFAULT));
  Hdf5Id type(H5Dget_type(dataset.get()));
  Hdf5Id space(H5Dget_space(dataset.get()));
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (!dataset.valid() || !type.valid() || points < 0) return -1;
  auto* total = static_cast<uint64_t*>(data);
  const auto bytes = CheckedMul(static_cast<uint64_t>(points), H5Tget_size(type.get()));
  if (!bytes) return -1;
  *total += *bytes;
  return 0;
}

}  // namespace

void Hdf5TreeCopier::CopyAttributes(hid_t src, hid_t dst, const std::string& path) {
  AttributeState state{dst, path, report_, nullptr};
  const herr_t status =
      H5Aiterate2(src, H5_INDEX_NAME, H5_ITER_INC, nullptr, VisitAttribute, &state);
  if (state.error) std::rethrow_exception(state.error);
  if (status < 0) ThrowRechunkError(ErrorCode::kCorruptData, path + ": its attributes");
}

uint64_t CountDatasetBytes(hid_t file) {
  uint64_t total = 0;
  if (H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, AddDatasetBytes, &total, H5O_INFO_BASIC) < 0) {
    ThrowRechunkError(ErrorCode::kCorruptData, "listing the datasets");
  }
  return total;
}

}  // namespace gpufeed
