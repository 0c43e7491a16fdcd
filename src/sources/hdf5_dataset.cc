#include "sources/hdf5_dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>

#include "core/checked_math.h"
#include "core/log.h"
#include "gpufeed/error.h"
#include "sources/hdf5_chunk_index.h"
#include "sources/hdf5_geometry.h"
#include "sources/hdf5_library.h"
#include "sources/hdf5_structure.h"
#include "sources/hdf5_superblock.h"

namespace gpufeed {
namespace {

// The `libhdf5` by-index listing is quadratic in 1.10.8; below this many chunks it is still
// only milliseconds, and the v1 B-tree reader covers the large h5py default files.
constexpr uint64_t kSlowIndexWarning = 20000;
// The chunk table holds one entry (24 bytes) per grid position, written or not. A file indexes
// at most one stored chunk per few dozen bytes, so a grid far larger than the file is a damaged
// shape (or a nearly empty sparse dataset, which gpufeed does not read): refused before the
// table is allocated.
constexpr uint64_t kMinChunkTableCap = uint64_t{1} << 20;
constexpr uint64_t kFileBytesPerGridEntry = 32;
// HDF5 caps a chunk below 4 GiB (its sizes are 32-bit in the index).
constexpr uint64_t kMaxChunkBytes = 0xffffffffu;
// Copy runs of one sample over all its chunks: a chunk shape that slices a sample into more
// pieces than this is refused rather than planned (each run costs 24 bytes).
constexpr uint64_t kMaxCopyRuns = uint64_t{1} << 22;
// zlib inflates at most 1032 times its input; a stored chunk claiming more decodes to garbage
// only after allocating the full chunk, so it is refused at open.
constexpr uint64_t kMaxInflateRatio = 1032;

std::string ClassName(H5T_class_t c) {
  switch (c) {
    case H5T_COMPOUND:
      return "compound";
    case H5T_STRING:
      return "string";
    case H5T_VLEN:
      return "variable-length";
    case H5T_REFERENCE:
      return "reference";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_ARRAY:
      return "array";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_TIME:
      return "time";
    default:
      return fmt::format("class {}", static_cast<int>(c));
  }
}

DType IntegerDType(hid_t type, size_t size, const std::string& what) {
  const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
  switch (size) {
    case 1:
      return is_signed ? DType::kInt8 : DType::kUInt8;
    case 2:
      return is_signed ? DType::kInt16 : DType::kUInt16;
    case 4:
      return is_signed ? DType::kInt32 : DType::kUInt32;
    case 8:
      return is_signed ? DType::kInt64 : DType::kUInt64;
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}-byte integers are not supported", what, size));
  }
}

// Maps the file type to a gpufeed dtype, or throws kUnsupported naming what it is.
DType MapType(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_INTEGER) return IntegerDType(type, size, what);
  if (cls == H5T_FLOAT) {
    size_t spos, epos, esize, mpos, msize;
    H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
    if (size == 2 && esize == 5 && msize == 10) return DType::kFloat16;
    if (size == 2 && esize == 8 && msize == 7) return DType::kBFloat16;
    if (size == 4 && esize == 8 && msize == 23) return DType::kFloat32;
    if (size == 8 && esize == 11 && msize == 52) return DType::kFloat64;
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a {}-byte float with a {}-bit exponent and {}-bit mantissa is "
                            "not supported (float16, bfloat16, float32, float64 are)",
                            what, size, esize, msize));
  }
  if (cls == H5T_ENUM) {
    Hdf5Id base(H5Tget_super(type));
    if (H5Tget_class(base.get()) != H5T_INTEGER) {
      throw Error(ErrorCode::kUnsupported, fmt::format("{}: enum of a non-integer", what));
    }
    // h5py stores bool as an int8 enum {FALSE: 0, TRUE: 1}.
    if (size == 1 && H5Tget_nmembers(type) == 2) {
      char* a = H5Tget_member_name(type, 0);
      char* b = H5Tget_member_name(type, 1);
      const bool is_bool = a && b && std::strcmp(a, "FALSE") == 0 && std::strcmp(b, "TRUE") == 0;
      H5free_memory(a);
      H5free_memory(b);
      if (is_bool) return DType::kBool;
    }
    return IntegerDType(base.get(), size, what);
  }
  std::string detail = ClassName(cls);
  if (cls == H5T_STRING) {
    detail = H5Tis_variable_str(type) > 0 ? "variable-length string" : "fixed-length string";
  }
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: dtype {} is not supported; gpufeed reads bool, integer and float "
                          "datasets",
                          what, detail));
}

void CheckRange(const Hdf5Dataset& ds, const File& file, uint64_t address, uint64_t size,
                const std::string& part) {
  if (address > file.Size() || size > file.Size() - address) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: dataset {}: {} at offset {} ({} bytes) lies past the end of the "
                            "file ({} bytes): truncated file?",
                            ds.path, ds.dataset, part, address, size, file.Size()));
  }
}

std::string ChunkName(const std::vector<uint64_t>& coords) {
  return fmt::format("chunk at [{}]", fmt::join(coords, ","));
}

std::vector<Hdf5RawChunk> ListChunksByIndex(hid_t dset, hid_t space, uint64_t n, int rank,
                                            const std::string& what) {
  std::vector<Hdf5RawChunk> out(n);
  std::vector<hsize_t> offset(rank);
  for (uint64_t i = 0; i < n; ++i) {
    unsigned mask = 0;
    haddr_t addr = 0;
    hsize_t size = 0;
    if (H5Dget_chunk_info(dset, space, i, offset.data(), &mask, &addr, &size) < 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: cannot read chunk {} of the chunk index: {}", what, i,
                              Hdf5ErrorMessage()));
    }
    out[i].coords.assign(offset.begin(), offset.end());
    out[i].address = addr;
    out[i].size = size;
    out[i].filter_mask = mask;
  }
  return out;
}

// The chunk index read by gpufeed's own walker where the layout allows (a v1 B-tree): bounded
// by the grid, every node visited once, checked against the file size. nullopt for index kinds
// only libhdf5 reads. Runs before any libhdf5 call that walks the index, so libhdf5 only walks
// a tree that passed these checks.
std::optional<std::vector<Hdf5RawChunk>> ReadOwnChunkIndex(const Hdf5Dataset& ds, hid_t file_id,
                                                           hid_t dset, const File& file,
                                                           uint64_t grid_total,
                                                           hsize_t& userblock) {
  const std::string what = fmt::format("{}: dataset {}", ds.path, ds.dataset);
  H5O_info_t info;
  Hdf5Id fcpl(H5Fget_create_plist(file_id));
  size_t sizeof_addr = 8, sizeof_size = 8;
  userblock = 0;
  if (H5Oget_info2(dset, &info, H5O_INFO_BASIC) < 0 ||
      H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
      H5Pget_userblock(fcpl.get(), &userblock) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot read the object header: {}", what, Hdf5ErrorMessage()));
  }
  Hdf5ObjectLocation where;
  where.header_address = info.addr;
  where.base_address = userblock;
  where.sizeof_addr = static_cast<unsigned>(sizeof_addr);
  where.sizeof_size = static_cast<unsigned>(sizeof_size);
  return ReadV1BTreeChunkIndex(file, where, static_cast<int>(ds.dims.size()), grid_total, what);
}

void BuildChunkIndex(Hdf5Dataset& ds, hid_t dset, hid_t space, const File& file,
                     std::optional<std::vector<Hdf5RawChunk>> own, hsize_t userblock,
                     uint64_t grid_total) {
  const std::string what = fmt::format("{}: dataset {}", ds.path, ds.dataset);
  const int rank = static_cast<int>(ds.dims.size());
  const auto start = std::chrono::steady_clock::now();
  hsize_t n = 0;
  if (H5Dget_num_chunks(dset, space, &n) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot count chunks: {}", what, Hdf5ErrorMessage()));
  }
  if (n > grid_total) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the chunk index counts {} chunks, more than the {} positions of "
                            "the chunk grid",
                            what, n, grid_total));
  }

  std::vector<Hdf5RawChunk> raw;
  if (own) {
    raw = std::move(*own);
    ds.index_method = "v1 B-tree, read directly";
    if (raw.size() != n) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunk index lists {} chunks where libhdf5 counts {}", what,
                              raw.size(), n));
    }
    if (n > 0) {
      // Cross-check one entry with libhdf5, so a misread index cannot pass silently.
      std::vector<Hdf5RawChunk> first = ListChunksByIndex(dset, space, 1, rank, what);
      const auto it = std::find_if(raw.begin(), raw.end(),
                                   [&](const auto& c) { return c.coords == first[0].coords; });
      if (it == raw.end() || it->address != first[0].address + userblock ||
          it->size != first[0].size) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: the chunk index disagrees with libhdf5 about its {}", what,
                                ChunkName(first[0].coords)));
      }
    }
  } else {
    ds.index_method = "libhdf5 H5Dget_chunk_info";
    if (n > kSlowIndexWarning) {
      Log(LogLevel::kWarning, fmt::format("{}: listing {} chunks through libhdf5 (not a v1 "
                                          "B-tree index); this open may take minutes",
                                          what, n));
    }
    raw = ListChunksByIndex(dset, space, n, rank, what);
    for (auto& c : raw) c.address = AddOrThrow(c.address, userblock, what + ": a chunk address");
  }

  ds.chunks.assign(grid_total, Hdf5ChunkEntry{});
  const uint64_t full_bytes = ds.ChunkBytes();
  uint64_t stored = 0;
  for (const auto& c : raw) {
    if (c.coords.size() != static_cast<size_t>(rank)) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunk index holds a {} of rank {} in a rank-{} dataset",
                              what, ChunkName(c.coords), c.coords.size(), rank));
    }
    uint64_t linear = 0;
    for (int d = 0; d < rank; ++d) {
      const uint64_t cd = static_cast<uint64_t>(ds.chunk_dims[d]);
      if (c.coords[d] % cd != 0 || c.coords[d] / cd >= static_cast<uint64_t>(ds.chunk_grid[d])) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: the chunk index holds a {} outside the dataset's chunk "
                                "grid",
                                what, ChunkName(c.coords)));
      }
      // Below grid_total, which was checked not to overflow.
      linear = linear * static_cast<uint64_t>(ds.chunk_grid[d]) + c.coords[d] / cd;
    }
    CheckRange(ds, file, c.address, c.size, ChunkName(c.coords));
    if (!ds.filtered() && c.size != full_bytes) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: unfiltered {} stores {} bytes, expected {}", what,
                              ChunkName(c.coords), c.size, full_bytes));
    }
    if (c.size == 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: {} is stored with 0 bytes", what, ChunkName(c.coords)));
    }
    if (full_bytes / kMaxInflateRatio > c.size) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: {} stores {} bytes, which no filter here decodes to the {} "
                              "bytes of a chunk",
                              what, ChunkName(c.coords), c.size, full_bytes));
    }
    if (ds.chunks[linear].size != 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunk index lists the {} twice", what, ChunkName(c.coords)));
    }
    ds.chunks[linear] = {c.address, c.size, c.filter_mask};
    stored += c.size;  // each below the file size, at most grid_total of them: no overflow
  }
  ds.storage_bytes = stored;
  ds.index_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Checks the shape before anything is sized from it: every extent a non-negative int64, and
// the element and byte counts of one sample and of the whole dataset within 64 bits (libhdf5
// computes them modulo 2^64).
void CheckShape(const std::vector<hsize_t>& dims, size_t element_size, const std::string& what) {
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] > static_cast<hsize_t>(INT64_MAX)) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: axis {} has {} elements, more than 2^63: damaged shape?", what,
                              d, dims[d]));
    }
  }
  const std::vector<uint64_t> all(dims.begin(), dims.end());
  const std::span<const uint64_t> sample(all.data() + 1, all.size() - 1);
  for (const auto& part : {sample, std::span<const uint64_t>(all)}) {
    const auto elements = CheckedProduct(part);
    if (!elements || !CheckedMul(*elements, element_size)) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: shape [{}] holds more than 2^64 {}: damaged shape?", what,
                              fmt::join(dims, ", "), elements ? "bytes" : "elements"));
    }
  }
}

// Checks the chunk shape and computes the grid; returns the number of grid positions.
uint64_t CheckChunkShape(Hdf5Dataset& ds, const File& file, const std::string& what) {
  const uint64_t chunk_elements = [&] {
    for (int64_t c : ds.chunk_dims) {
      if (c < 1) {
        throw Error(ErrorCode::kCorruptData, fmt::format("{}: chunk shape [{}] has an empty axis",
                                                         what, fmt::join(ds.chunk_dims, ", ")));
      }
    }
    std::vector<uint64_t> c(ds.chunk_dims.begin(), ds.chunk_dims.end());
    return CheckedProduct(c).value_or(UINT64_MAX);
  }();
  const auto chunk_bytes = CheckedMul(chunk_elements, ds.element_size);
  if (!chunk_bytes || *chunk_bytes > kMaxChunkBytes) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: chunk shape [{}] of {}-byte elements is 4 GiB or more (HDF5 "
                            "chunks are smaller): damaged chunk shape?",
                            what, fmt::join(ds.chunk_dims, ", "), ds.element_size));
  }
  std::vector<uint64_t> grid;
  for (size_t d = 0; d < ds.dims.size(); ++d) {
    const auto n = static_cast<uint64_t>(ds.dims[d]);
    const auto c = static_cast<uint64_t>(ds.chunk_dims[d]);
    grid.push_back(n / c + (n % c != 0 ? 1 : 0));
  }
  ds.chunk_grid.assign(grid.begin(), grid.end());
  const auto total = CheckedProduct(grid);
  const uint64_t cap = std::max(kMinChunkTableCap, file.Size() / kFileBytesPerGridEntry);
  if (!total || *total > cap) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: shape [{}] in chunks of [{}] makes a grid of {} chunks, more than "
                            "a {}-byte file can index ({} at most): damaged shape or chunk "
                            "shape?",
                            what, fmt::join(ds.dims, ", "), fmt::join(ds.chunk_dims, ", "),
                            total ? fmt::format("{}", *total)
                                  : fmt::format("[{}] (over 2^64)", fmt::join(grid, " x ")),
                            file.Size(), cap));
  }
  const auto runs = Hdf5ChunkGeometry::CountRuns(ds.dims, ds.chunk_dims);
  if (!runs || *runs > kMaxCopyRuns) {
    throw Error(
        ErrorCode::kUnsupported,
        fmt::format("{}: chunks of [{}] cut each sample of [{}] into {} pieces (at most "
                    "{} are read): rewrite the file with larger chunks",
                    what, fmt::join(ds.chunk_dims, ", "), fmt::join(ds.dims, ", "),
                    runs ? fmt::format("{}", *runs) : std::string("over 2^64"), kMaxCopyRuns));
  }
  return *total;
}

herr_t CollectDataset(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) {
    static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
  }
  return 0;
}

}  // namespace

size_t Hdf5Dataset::ChunkBytes() const {
  size_t n = element_size;
  for (int64_t c : chunk_dims) n *= static_cast<size_t>(c);
  return n;
}

int64_t Hdf5Dataset::ChunksPerSample() const {
  int64_t n = 1;
  for (size_t d = 1; d < chunk_grid.size(); ++d) n *= chunk_grid[d];
  return n;
}

Hdf5Id OpenHdf5File(const File& file) {
  const std::string& path = file.path();
  // gpufeed's own checks first: libhdf5 only opens a file whose superblock and objects
  // passed them.
  CheckHdf5Structure(file, CheckHdf5Superblock(file));
  Hdf5Lock lock;
  Hdf5Id id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!id.valid()) {
    const std::string reason = Hdf5ErrorMessage();
    // A writer holds it: HDF5's file lock, or the superblock's "open for writing" flags
    // (SWMR, or a writer that crashed). That is no damage; say who holds it.
    if (reason.find("unable to lock file") != std::string::npos) {
      throw Error(ErrorCode::kIo,
                  fmt::format("{}: another process has this HDF5 file open for writing (HDF5's "
                              "file lock refused a reader): close it there first (h5py: "
                              "File.close()) and try again ({})",
                              path, reason));
    }
    if (reason.find("already open for write") != std::string::npos) {
      throw Error(ErrorCode::kIo,
                  fmt::format("{}: this HDF5 file is marked open for writing (its superblock's "
                              "consistency flags): a process is writing it, or one that did "
                              "crashed; close the writer, or clear the flags with `h5clear -s "
                              "{}` if none runs ({})",
                              path, path, reason));
    }
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: not a readable HDF5 file (truncated or damaged?): {}", path,
                            reason));
  }
  return id;
}

std::vector<std::string> ListHdf5Datasets(hid_t file_id) {
  Hdf5Lock lock;
  std::vector<std::string> names;
  if (H5Ovisit2(file_id, H5_INDEX_NAME, H5_ITER_INC, CollectDataset, &names, H5O_INFO_BASIC) <
      0) {
    const std::string reason = Hdf5ErrorMessage();
    char path[4096] = "the HDF5 file";
    H5Fget_name(file_id, path, sizeof(path));
    H5Eclear2(H5E_DEFAULT);
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the file is damaged: its objects cannot be listed ({})", path,
                            reason));
  }
  H5Eclear2(H5E_DEFAULT);
  std::sort(names.begin(), names.end());
  return names;
}

Hdf5Dataset OpenHdf5Dataset(hid_t file_id, const File& file, const std::string& dataset) {
  Hdf5Lock lock;
  Hdf5Dataset ds;
  ds.path = file.path();
  ds.dataset = dataset;
  const std::string what = fmt::format("{}: dataset {}", ds.path, dataset);

  Hdf5Id dset(H5Dopen2(file_id, dataset.c_str(), H5P_DEFAULT));
  if (!dset.valid()) {
    const std::string reason = Hdf5ErrorMessage();
    const auto present = ListHdf5Datasets(file_id);
    if (std::find(present.begin(), present.end(),
                  dataset.starts_with('/') ? dataset : "/" + dataset) != present.end()) {
      throw Error(ErrorCode::kCorruptData, fmt::format("{}: cannot open: {}", what, reason));
    }
    throw Error(ErrorCode::kNotFound,
                fmt::format("{}: no dataset '{}'; the datasets there are: {}", ds.path, dataset,
                            present.empty()
                                ? fmt::format("none (an empty file, or a damaged one: {})", reason)
                                : fmt::format("{}", fmt::join(present, ", "))));
  }
  Hdf5Id type(H5Dget_type(dset.get()));
  Hdf5Id space(H5Dget_space(dset.get()));
  Hdf5Id dcpl(H5Dget_create_plist(dset.get()));
  if (!type.valid() || !space.valid() || !dcpl.valid()) {
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: cannot read its type, shape or layout: {}", what, Hdf5ErrorMessage()));
  }
  ds.field.dtype = MapType(type.get(), what);
  ds.element_size = H5Tget_size(type.get());
  ds.big_endian = ds.element_size > 1 && H5Tget_order(type.get()) == H5T_ORDER_BE;

  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (H5Sget_simple_extent_type(space.get()) != H5S_SIMPLE || rank < 1) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a scalar or empty dataspace has no samples along axis 0", what));
  }
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  CheckShape(dims, ds.element_size, what);
  ds.dims.assign(dims.begin(), dims.end());
  ds.samples = ds.dims[0];
  ds.field.shape.assign(ds.dims.begin() + 1, ds.dims.end());
  // Both below 2^64 (CheckShape).
  const uint64_t total_bytes = static_cast<uint64_t>(ds.samples) * ds.field.SampleBytes();

  // The fill value in the file's own representation; zeros when none is defined.
  ds.fill_value.assign(ds.element_size, std::byte{0});
  H5D_fill_value_t fill_status = H5D_FILL_VALUE_UNDEFINED;
  if (H5Pfill_value_defined(dcpl.get(), &fill_status) >= 0 &&
      fill_status != H5D_FILL_VALUE_UNDEFINED) {
    if (H5Pget_fill_value(dcpl.get(), type.get(), ds.fill_value.data()) < 0) {
      H5Eclear2(H5E_DEFAULT);
      std::fill(ds.fill_value.begin(), ds.fill_value.end(), std::byte{0});
    }
  }

  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 16;
    unsigned values[16] = {};
    char name[256] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvalues,
                                           values, sizeof(name), name, &config);
    Hdf5Filter f;
    f.id = static_cast<int>(id);
    f.name = name;
    f.cd_values.assign(values, values + std::min<size_t>(nvalues, 16));
    ds.filters.push_back(std::move(f));
  }

  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  const bool external = H5Pget_external_count(dcpl.get()) > 0;
  switch (layout) {
    case H5D_COMPACT: {
      ds.layout_name = "compact";
      ds.storage = Hdf5Storage::kInMemory;
      // Compact data lives in the object header, inside the file.
      CheckRange(ds, file, 0, total_bytes, "the compact data");
      ds.in_memory.resize(total_bytes);
      ds.storage_bytes = total_bytes;
      if (!ds.in_memory.empty() &&
          H5Dread(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ds.in_memory.data()) < 0) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: cannot read the compact data: {}", what, Hdf5ErrorMessage()));
      }
      break;
    }
    case H5D_CONTIGUOUS: {
      ds.layout_name = "contiguous";
      if (external) {
        ds.storage = Hdf5Storage::kLibrary;
        ds.library_reason = "external storage";
        break;
      }
      const haddr_t addr = H5Dget_offset(dset.get());
      if (addr == HADDR_UNDEF) {
        H5Eclear2(H5E_DEFAULT);
        ds.storage = Hdf5Storage::kFill;
        break;
      }
      ds.storage = Hdf5Storage::kContiguous;
      ds.contiguous_address = addr;
      CheckRange(ds, file, addr, total_bytes, "the data");
      ds.storage_bytes = total_bytes;
      break;
    }
    case H5D_CHUNKED: {
      ds.layout_name = "chunked";
      std::vector<hsize_t> cdims(rank);
      if (H5Pget_chunk(dcpl.get(), rank, cdims.data()) != rank) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: cannot read the chunk shape: {}", what, Hdf5ErrorMessage()));
      }
      // v3 and v4 layouts store chunk extents in at most 32 bits.
      for (int d = 0; d < rank; ++d) {
        ds.chunk_dims.push_back(static_cast<int64_t>(std::min<hsize_t>(cdims[d], UINT32_MAX)));
      }
      const uint64_t grid_total = CheckChunkShape(ds, file, what);
      // gpufeed's own walk of the index comes first: libhdf5's own walks (counting chunks,
      // storage size) follow only once the tree passed it.
      hsize_t userblock = 0;
      auto own = ReadOwnChunkIndex(ds, file_id, dset.get(), file, grid_total, userblock);
      for (const auto& f : ds.filters) {
        if (!IsDecodableHdf5Filter(f.id)) {
          ds.storage = Hdf5Storage::kLibrary;
          ds.library_reason =
              fmt::format("filter {}", f.name.empty() ? std::to_string(f.id) : f.name);
          break;
        }
      }
      if (ds.storage == Hdf5Storage::kLibrary) {
        if (own) {
          uint64_t stored = 0;
          for (const auto& c : *own) {
            CheckRange(ds, file, c.address, c.size, ChunkName(c.coords));
            stored += c.size;  // each below the file size, at most grid_total of them
          }
          ds.storage_bytes = stored;
        } else {
          ds.storage_bytes = H5Dget_storage_size(dset.get());
        }
        break;
      }
      ds.storage = Hdf5Storage::kChunked;
      BuildChunkIndex(ds, dset.get(), space.get(), file, std::move(own), userblock, grid_total);
      break;
    }
    default:
      // Virtual datasets name other files; gpufeed's checks cannot follow them there.
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: the {} layout is not supported", what,
                              layout == H5D_VIRTUAL ? "virtual" : "unknown"));
  }
  if (ds.storage == Hdf5Storage::kLibrary) {
    // Reads go through H5Dread into little-endian memory of the same type.
    Hdf5Id memory_type(H5Tcopy(type.get()));
    if (ds.element_size > 1) H5Tset_order(memory_type.get(), H5T_ORDER_LE);
    ds.big_endian = false;
    ds.library_dataset = std::make_shared<Hdf5Id>(std::move(dset));
    ds.library_memory_type = std::make_shared<Hdf5Id>(std::move(memory_type));
  }
  return ds;
}

}  // namespace gpufeed
