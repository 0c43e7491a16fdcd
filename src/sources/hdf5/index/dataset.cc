#include "sources/hdf5/index/dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>

#include "core/checked_math.h"
#include "core/path_names.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/dtype.h"
#include "sources/hdf5/format/file_driver.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/format/structure.h"
#include "sources/hdf5/format/superblock.h"
#include "sources/hdf5/index/chunk_table.h"
#include "sources/hdf5/index/compound.h"
#include "sources/hdf5/index/vlen.h"

namespace gpufeed {
namespace {

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

// The external link an open stopped at (H5Pset_elink_cb's callback refuses to follow it).
struct ExternalLinkSeen {
  bool seen = false;
  std::string group, target_file, target_object;
};

herr_t RefuseExternalLink(const char*, const char* parent_group, const char* child_file,
                          const char* child_object, unsigned*, hid_t, void* data) {
  auto* seen = static_cast<ExternalLinkSeen*>(data);
  seen->seen = true;
  seen->group = parent_group ? parent_group : "";
  seen->target_file = child_file ? child_file : "";
  seen->target_object = child_object ? child_object : "";
  return -1;
}

// A dataset access list that refuses external links and, when `external_prefix` is set,
// finds external storage files there (libhdf5's default: the current directory).
Hdf5Id AccessList(ExternalLinkSeen* seen, const std::string& external_prefix) {
  Hdf5Id dapl(H5Pcreate(H5P_DATASET_ACCESS));
  if (!dapl.valid() || H5Pset_elink_cb(dapl.get(), RefuseExternalLink, seen) < 0 ||
      (!external_prefix.empty() && H5Pset_efile_prefix(dapl.get(), external_prefix.c_str()) < 0)) {
    throw Error(ErrorCode::kIo,
                fmt::format("cannot make a dataset access list: {}", Hdf5ErrorMessage()));
  }
  return dapl;
}

std::string NoDatasets(hid_t file_id, const std::string& reason) {
  const std::string links = DescribeHdf5ExternalLinks(file_id);
  return links.empty() ? fmt::format("none (an empty file, or a damaged one: {})", reason)
                       : "none; " + links;
}

// The dataset at `dataset`, or kNotFound listing what the file holds (kCorruptData when it is
// there but libhdf5 cannot open it). External links are refused naming their target: their
// data lies in another file, which gpufeed has not checked and does not read through this one.
Hdf5Id OpenOrExplain(hid_t file_id, const Hdf5Dataset& ds, const std::string& what,
                     const std::string& external_prefix = "") {
  ExternalLinkSeen link;
  const Hdf5Id dapl = AccessList(&link, external_prefix);
  Hdf5Id dset(H5Dopen2(file_id, ds.dataset.c_str(), dapl.get()));
  if (link.seen) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: the path crosses an external link in group {} to {} in file "
                            "{}; gpufeed reads a dataset from the file that holds it: open {} "
                            "(dataset {}) instead",
                            what, link.group, link.target_object, link.target_file,
                            link.target_file, link.target_object));
  }
  if (dset.valid()) return dset;
  const std::string reason = Hdf5ErrorMessage();
  const auto present = ListHdf5Datasets(file_id);
  const std::string& name = ds.dataset;
  if (std::find(present.begin(), present.end(), name.starts_with('/') ? name : "/" + name) !=
      present.end()) {
    throw Error(ErrorCode::kCorruptData, fmt::format("{}: cannot open: {}", what, reason));
  }
  throw Error(ErrorCode::kNotFound,
              fmt::format("{}: no dataset '{}'; the datasets there are: {}", ds.path, name,
                          present.empty() ? NoDatasets(file_id, reason)
                                          : fmt::format("{}", fmt::join(present, ", "))));
}

// dtype, element size, byte order and shape.
// `element_type` is the compound member's type when reading one member (`type`: the record's).
void ReadTypeAndShape(Hdf5Dataset& ds, hid_t type, hid_t element_type, hid_t space,
                      const std::string& what) {
  const Hdf5TypeLayout layout = ReadHdf5ElementLayout(element_type, what);
  ds.field.dtype = layout.dtype;
  ds.element_size = H5Tget_size(type);
  ds.big_endian = layout.big_endian;
  ds.bitfield = layout.bitfield;
  ds.type_conversion = layout.conversion;
  const int rank = H5Sget_simple_extent_ndims(space);
  if (H5Sget_simple_extent_type(space) != H5S_SIMPLE || rank < 1) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a scalar or empty dataspace has no samples along axis 0", what));
  }
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  CheckShape(dims, ds.element_size, what);
  ds.dims.assign(dims.begin(), dims.end());
  ds.samples = ds.dims[0];
  ds.field.shape.assign(ds.dims.begin() + 1, ds.dims.end());
}

// The fill value in the file's own representation (zeros when none is defined), and the
// filter pipeline in write order.
void ReadFillAndFilters(Hdf5Dataset& ds, hid_t type, hid_t dcpl) {
  ds.fill_value.assign(ds.element_size, std::byte{0});
  H5D_fill_value_t fill_status = H5D_FILL_VALUE_UNDEFINED;
  // A variable-length fill libhdf5 would convert through the heap: a null reference instead.
  if (!ds.vlen && H5Pfill_value_defined(dcpl, &fill_status) >= 0 &&
      fill_status != H5D_FILL_VALUE_UNDEFINED) {
    if (H5Pget_fill_value(dcpl, type, ds.fill_value.data()) < 0) {
      H5Eclear2(H5E_DEFAULT);
      std::fill(ds.fill_value.begin(), ds.fill_value.end(), std::byte{0});
    }
  }
  const int nfilters = H5Pget_nfilters(dcpl);
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 16;
    unsigned values[16] = {};
    char name[256] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nvalues, values,
                                           sizeof(name), name, &config);
    Hdf5Filter f;
    f.id = static_cast<int>(id);
    f.name = name;
    f.cd_values.assign(values, values + std::min<size_t>(nvalues, 16));
    ds.filters.push_back(std::move(f));
  }
}

// Compact data lives in the object header: read whole now, converted by libhdf5 into the
// dtype's memory type (the structure walk checked that the message holds exactly the
// dataset's bytes: libhdf5 1.10.8 copies from a null buffer when it holds none).
void OpenCompact(Hdf5Dataset& ds, hid_t dset, hid_t type, hid_t space, hid_t element,
                 const File& file, const std::string& what) {
  // libhdf5 copies each element at the size it reads the datatype as, which can exceed what
  // the message says (a version 1 compound's array member past the record widens it).
  const hssize_t points = H5Sget_simple_extent_npoints(space);
  const size_t type_bytes = H5Tget_size(type);
  const hsize_t stored = H5Dget_storage_size(dset);
  uint64_t needed = 0;
  if (points < 0 || type_bytes == 0 ||
      __builtin_mul_overflow(static_cast<uint64_t>(points), type_bytes, &needed) ||
      needed != stored) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the compact layout holds {} bytes, but libhdf5 reads its "
                            "datatype as {} bytes for each of {} elements",
                            what, stored, type_bytes, points));
  }
  // Both below 2^64 (CheckShape).
  const uint64_t total_bytes = static_cast<uint64_t>(ds.samples) * ds.field.SampleBytes();
  ds.layout_name = "compact";
  ds.storage = Hdf5Storage::kInMemory;
  CheckHdf5DataRange(ds, file, 0, total_bytes, "the compact data");
  ds.in_memory.resize(total_bytes);
  ds.storage_bytes = total_bytes;
  const Hdf5Id memory_type = Hdf5DatasetMemoryType(ds, element, what);
  if (!ds.copy_file_layout) ds.big_endian = false;
  if (!ds.in_memory.empty() &&
      H5Dread(dset, memory_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ds.in_memory.data()) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: cannot read the compact data: {}", what, Hdf5ErrorMessage()));
  }
}

// Where libhdf5 will look for one external storage file: beside the HDF5 file ("${ORIGIN}")
// or its default (HDF5_EXTFILE_PREFIX, else the current directory).
std::filesystem::path ExternalCandidate(const Hdf5Dataset& ds, const std::string& name,
                                        bool origin) {
  const std::filesystem::path p(name);
  if (p.is_absolute()) return p;
  const std::filesystem::path dir = std::filesystem::path(ds.path).parent_path();
  const char* env = std::getenv("HDF5_EXTFILE_PREFIX");
  if (env != nullptr && *env != '\0') {
    return std::string(env) == "${ORIGIN}" ? dir / p : std::filesystem::path(env) / p;
  }
  return origin ? dir / p : p;
}

// External storage (H5Pset_external): the dataset's bytes lie in raw files its creation list
// names. Every segment's file must exist and hold the segment, and the segments the dataset's
// bytes: libhdf5 reads short or missing files as zeros or fails mid-epoch. Relative names are
// looked up beside the HDF5 file first (where a data set's files travel together), then where
// libhdf5 looks by default. Returns the prefix to open the dataset with.
std::string CheckExternalStorage(const Hdf5Dataset& ds, hid_t dcpl, const std::string& what) {
  struct Segment {
    std::string name;
    uint64_t offset, size;
  };
  std::vector<Segment> segments;
  for (int i = 0; i < H5Pget_external_count(dcpl); ++i) {
    char name[4096] = {};
    off_t offset = 0;
    hsize_t size = 0;
    if (H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof(name), name, &offset, &size) < 0 ||
        offset < 0) {
      throw Error(ErrorCode::kCorruptData, fmt::format("{}: cannot read external storage "
                                                       "segment {}: {}",
                                                       what, i, Hdf5ErrorMessage()));
    }
    segments.push_back({name, static_cast<uint64_t>(offset), size});
  }
  const uint64_t needed = static_cast<uint64_t>(ds.samples) * ds.field.SampleBytes();
  for (bool origin : {true, false}) {
    bool all_there = true;
    uint64_t total = 0;
    for (const auto& s : segments) {
      std::error_code ec;
      const auto path = ExternalCandidate(ds, s.name, origin);
      const uint64_t have = std::filesystem::file_size(path, ec);
      if (ec) {
        all_there = false;
        break;
      }
      const uint64_t want = s.size == H5F_UNLIMITED ? have - std::min(have, s.offset) : s.size;
      const auto end = CheckedAdd(s.offset, want);
      if (!end || *end > have) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: external storage file {} holds {} bytes; the dataset keeps "
                                "{} bytes there at offset {}",
                                what, path.string(), have, want, s.offset));
      }
      total = AddOrThrow(total, want, what + ": external storage size");
    }
    if (!all_there) continue;
    if (total < needed) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: external storage holds {} bytes for {} bytes of data", what,
                              total, needed));
    }
    return origin ? "${ORIGIN}" : "";
  }
  throw Error(ErrorCode::kNotFound,
              fmt::format("{}: external storage file {} is missing (looked in {} and {})", what,
                          segments.empty() ? std::string("?") : segments[0].name,
                          std::filesystem::absolute(ds.path).parent_path().string(),
                          std::filesystem::current_path().string()));
}

void OpenContiguous(Hdf5Dataset& ds, hid_t file_id, Hdf5Id& dset, hid_t dcpl, const File& file,
                    const std::string& what) {
  ds.layout_name = "contiguous";
  if (H5Pget_external_count(dcpl) > 0) {
    if (IsUriPath(ds.path)) {
      // libhdf5 opens external storage files by local path, beside no object.
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: the data lies in external storage files, which libhdf5 "
                              "opens by local path; copy the file and its external files to a "
                              "local folder to read it",
                              what));
    }
    const std::string prefix = CheckExternalStorage(ds, dcpl, what);
    if (!prefix.empty()) {
      dset = Hdf5Id();  // libhdf5 keeps one prefix per open dataset: close it first
      dset = OpenOrExplain(file_id, ds, what, prefix);
    }
    ds.storage = Hdf5Storage::kLibrary;
    ds.library_reason = "external storage";
    return;
  }
  const haddr_t addr = H5Dget_offset(dset.get());
  if (addr == HADDR_UNDEF) {
    H5Eclear2(H5E_DEFAULT);
    ds.storage = Hdf5Storage::kFill;
    return;
  }
  const uint64_t total_bytes = static_cast<uint64_t>(ds.samples) * ds.field.SampleBytes();
  ds.storage = Hdf5Storage::kContiguous;
  ds.contiguous_address = addr;
  CheckHdf5DataRange(ds, file, addr, total_bytes, "the data");
  ds.storage_bytes = total_bytes;
}

// Elements whose bits are not their dtype's standard layout (an N-bit integer, another
// exponent bias) are converted by libhdf5: read as they are, a 3-bit -4 would read as 4.
// Compact data was converted when it was read.
void UseLibraryConversion(Hdf5Dataset& ds, const std::string& what) {
  const std::string reason =
      fmt::format("elements libhdf5 {}: {}",
                  ds.member.empty() ? "converts" : "picks out of each record", ds.type_conversion);
  if (ds.storage == Hdf5Storage::kInMemory) return;
  if (ds.storage == Hdf5Storage::kLibrary) {
    ds.library_reason += "; " + reason;
    return;
  }
  // libhdf5 must decode the filters gpufeed would have decoded itself.
  RequireHdf5LibraryFilters(ds.filters, what);
  ds.storage = Hdf5Storage::kLibrary;
  ds.library_reason = reason;
}

herr_t CollectDataset(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) {
    static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
  }
  return 0;
}

herr_t CollectExternalLink(hid_t group, const char* name, const H5L_info_t* info, void* data) {
  if (info->type != H5L_TYPE_EXTERNAL) return 0;
  std::vector<char> value(info->u.val_size);
  const char* file = nullptr;
  const char* object = nullptr;
  unsigned flags = 0;
  if (value.empty() || H5Lget_val(group, name, value.data(), value.size(), H5P_DEFAULT) < 0 ||
      H5Lunpack_elink_val(value.data(), value.size(), &flags, &file, &object) < 0) {
    return 0;  // the listing names the links it can read
  }
  static_cast<std::vector<std::string>*>(data)->push_back(
      fmt::format("/{} -> {} ({})", name, file ? file : "?", object ? object : "?"));
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

Hdf5Id OpenHdf5File(std::shared_ptr<const File> file) {
  const std::string path = file->path();
  // gpufeed's own checks first: libhdf5 only opens a file whose superblock and objects
  // passed them.
  CheckHdf5Structure(*file, CheckHdf5Superblock(*file));
  Hdf5Lock lock;
  // libhdf5 reads the file through the seam too (file_driver.h), never by its path.
  const Hdf5Id access = Hdf5FileAccessList(std::move(file));
  Hdf5Id id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()));
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
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: not a readable HDF5 file (truncated or damaged?): {}", path, reason));
  }
  return id;
}

std::vector<std::string> ListHdf5Datasets(hid_t file_id) {
  Hdf5Lock lock;
  std::vector<std::string> names;
  if (H5Ovisit2(file_id, H5_INDEX_NAME, H5_ITER_INC, CollectDataset, &names, H5O_INFO_BASIC) < 0) {
    const std::string reason = Hdf5ErrorMessage();
    char path[4096] = "the HDF5 file";
    H5Fget_name(file_id, path, sizeof(path));
    H5Eclear2(H5E_DEFAULT);
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: the file is damaged: its objects cannot be listed ({})", path, reason));
  }
  H5Eclear2(H5E_DEFAULT);
  std::sort(names.begin(), names.end());
  return names;
}

std::string DescribeHdf5ExternalLinks(hid_t file_id) {
  Hdf5Lock lock;
  std::vector<std::string> links;
  // Hard links only are followed (libhdf5 does not cross external links while it visits).
  H5Lvisit(file_id, H5_INDEX_NAME, H5_ITER_INC, CollectExternalLink, &links);
  H5Eclear2(H5E_DEFAULT);
  if (links.empty()) return "";
  constexpr size_t kShown = 8;
  std::string shown = fmt::format(
      "{}", fmt::join(links.begin(), links.begin() + std::min(links.size(), kShown), ", "));
  if (links.size() > kShown) shown += fmt::format(" and {} more", links.size() - kShown);
  return fmt::format(
      "its datasets lie behind external links in other files: {}; gpufeed reads "
      "a dataset from the file that holds it: open those files",
      shown);
}

Hdf5Dataset OpenHdf5Dataset(hid_t file_id, const File& file, const std::string& dataset) {
  Hdf5Lock lock;
  Hdf5Dataset ds;
  ds.path = file.path();
  ds.dataset = dataset;
  if (const auto split = SplitHdf5MemberName(file_id, dataset)) {
    ds.dataset = split->dataset;
    ds.member = split->member;
  }
  const std::string what = fmt::format("{}: dataset {}", ds.path, dataset);
  Hdf5Id dset = OpenOrExplain(file_id, ds, what);
  Hdf5Id type(H5Dget_type(dset.get()));
  Hdf5Id space(H5Dget_space(dset.get()));
  Hdf5Id dcpl(H5Dget_create_plist(dset.get()));
  if (!type.valid() || !space.valid() || !dcpl.valid()) {
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: cannot read its type, shape or layout: {}", what, Hdf5ErrorMessage()));
  }
  const Hdf5ElementType element = Hdf5ElementTypeOf(ds, type.get(), what);
  ReadTypeAndShape(ds, type.get(), element.base.get(), space.get(), what);
  AdoptHdf5ElementType(ds, element);
  AdoptHdf5Vlen(ds, element.element.get(), file_id, dcpl.get(), what);
  ReadFillAndFilters(ds, type.get(), dcpl.get());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_COMPACT) {
    OpenCompact(ds, dset.get(), type.get(), space.get(), element.element.get(), file, what);
  } else if (layout == H5D_CONTIGUOUS) {
    OpenContiguous(ds, file_id, dset, dcpl.get(), file, what);
  } else if (layout == H5D_CHUNKED) {
    OpenHdf5ChunkedLayout(ds, file_id, dset.get(), space.get(), dcpl.get(), file);
  } else {
    // Virtual datasets name other files; gpufeed's checks cannot follow them there.
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: the {} layout is not supported", what,
                            layout == H5D_VIRTUAL ? "virtual" : "unknown"));
  }
  if (ds.vlen && ds.storage == Hdf5Storage::kLibrary) {
    // Its references would have to come through H5Dread, which resolves them itself.
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: a variable-length dataset that needs libhdf5 ({}) is not "
                            "supported; rewrite it with gzip or no filter",
                            what, ds.library_reason));
  }
  if (!ds.type_conversion.empty()) UseLibraryConversion(ds, what);
  if (ds.storage == Hdf5Storage::kLibrary) {
    // Reads go through H5Dread: libhdf5 converts the file's layout (byte order, precision,
    // sign extension) into the dtype's native type as it does for h5py, or copies it
    // (Hdf5DatasetMemoryType says when).
    Hdf5Id memory_type = Hdf5DatasetMemoryType(ds, element.element.get(), what);
    if (!ds.copy_file_layout) ds.big_endian = false;
    ds.library_dataset = std::make_shared<Hdf5Id>(std::move(dset));
    ds.library_memory_type = std::make_shared<Hdf5Id>(std::move(memory_type));
  }
  // The reader swaps a member's values, not records.
  if (!ds.member.empty()) ds.element_size = DTypeSize(ds.field.dtype);
  return ds;
}

}  // namespace gpufeed
