#include "sources/hdf5_dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/log.h"
#include "gpufeed/error.h"
#include "sources/hdf5_chunk_index.h"
#include "sources/hdf5_library.h"

namespace gpufeed {
namespace {

// The `libhdf5` by-index listing is quadratic in 1.10.8; below this many chunks it is still
// only milliseconds, and the v1 B-tree reader covers the large h5py default files.
constexpr uint64_t kSlowIndexWarning = 20000;

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

void BuildChunkIndex(Hdf5Dataset& ds, hid_t file_id, hid_t dset, hid_t space, const File& file) {
  const std::string what = fmt::format("{}: dataset {}", ds.path, ds.dataset);
  const int rank = static_cast<int>(ds.dims.size());
  const auto start = std::chrono::steady_clock::now();
  hsize_t n = 0;
  if (H5Dget_num_chunks(dset, space, &n) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot count chunks: {}", what, Hdf5ErrorMessage()));
  }
  Hdf5ObjectLocation where;
  H5O_info_t info;
  Hdf5Id fcpl(H5Fget_create_plist(file_id));
  size_t sizeof_addr = 8, sizeof_size = 8;
  hsize_t userblock = 0;
  if (H5Oget_info2(dset, &info, H5O_INFO_BASIC) < 0 ||
      H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
      H5Pget_userblock(fcpl.get(), &userblock) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot read the object header: {}", what, Hdf5ErrorMessage()));
  }
  where.header_address = info.addr;
  where.base_address = userblock;
  where.sizeof_addr = static_cast<unsigned>(sizeof_addr);
  where.sizeof_size = static_cast<unsigned>(sizeof_size);

  std::vector<Hdf5RawChunk> raw;
  auto parsed = ReadV1BTreeChunkIndex(file, where, rank, what);
  if (parsed) {
    raw = std::move(*parsed);
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
    for (auto& c : raw) c.address += userblock;
  }

  size_t total = 1;
  for (int64_t g : ds.chunk_grid) total *= static_cast<size_t>(g);
  ds.chunks.assign(total, Hdf5ChunkEntry{});
  const uint64_t full_bytes = ds.ChunkBytes();
  for (const auto& c : raw) {
    size_t linear = 0;
    for (int d = 0; d < rank; ++d) {
      const uint64_t cd = static_cast<uint64_t>(ds.chunk_dims[d]);
      if (c.coords.size() != static_cast<size_t>(rank) || c.coords[d] % cd != 0 ||
          c.coords[d] / cd >= static_cast<uint64_t>(ds.chunk_grid[d])) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: the chunk index holds a {} outside the dataset's chunk "
                                "grid",
                                what, ChunkName(c.coords)));
      }
      linear = linear * static_cast<size_t>(ds.chunk_grid[d]) + c.coords[d] / cd;
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
    ds.chunks[linear] = {c.address, c.size, c.filter_mask};
  }
  ds.index_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

std::vector<std::string> ListHdf5Datasets(hid_t file_id) {
  Hdf5Lock lock;
  std::vector<std::string> names;
  H5Ovisit2(file_id, H5_INDEX_NAME, H5_ITER_INC, CollectDataset, &names, H5O_INFO_BASIC);
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
                            present.empty() ? std::string("none")
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
  ds.dims.assign(dims.begin(), dims.end());
  ds.samples = ds.dims[0];
  ds.field.shape.assign(ds.dims.begin() + 1, ds.dims.end());
  ds.storage_bytes = H5Dget_storage_size(dset.get());

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
      ds.in_memory.resize(static_cast<size_t>(ds.samples) * ds.field.SampleBytes());
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
      CheckRange(ds, file, addr, static_cast<uint64_t>(ds.samples) * ds.field.SampleBytes(),
                 "the data");
      break;
    }
    case H5D_CHUNKED: {
      ds.layout_name = "chunked";
      std::vector<hsize_t> cdims(rank);
      if (H5Pget_chunk(dcpl.get(), rank, cdims.data()) != rank) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: cannot read the chunk shape: {}", what, Hdf5ErrorMessage()));
      }
      for (int d = 0; d < rank; ++d) {
        ds.chunk_dims.push_back(static_cast<int64_t>(cdims[d]));
        ds.chunk_grid.push_back(cdims[d] == 0 ? 0
                                              : (ds.dims[d] + static_cast<int64_t>(cdims[d]) - 1) /
                                                    static_cast<int64_t>(cdims[d]));
      }
      for (const auto& f : ds.filters) {
        if (!IsDecodableHdf5Filter(f.id)) {
          ds.storage = Hdf5Storage::kLibrary;
          ds.library_reason =
              fmt::format("filter {}", f.name.empty() ? std::to_string(f.id) : f.name);
          break;
        }
      }
      if (ds.storage == Hdf5Storage::kLibrary) break;
      ds.storage = Hdf5Storage::kChunked;
      BuildChunkIndex(ds, file_id, dset.get(), space.get(), file);
      break;
    }
    default:
      ds.layout_name = layout == H5D_VIRTUAL ? "virtual" : "unknown";
      ds.storage = Hdf5Storage::kLibrary;
      ds.library_reason = ds.layout_name + " layout";
      break;
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
