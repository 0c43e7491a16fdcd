#include "sources/hdf5/tools/rechunk.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "core/path_names.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/dataset.h"
#include "sources/hdf5/tools/rechunk_copy.h"

namespace gpufeed {
namespace {

struct PathFacts {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

PathFacts Stat(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino};
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void CheckPaths(const RechunkOptions& options) {
  if (options.input.empty() || options.output.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "rechunk: an input and an output path are needed");
  }
  if (options.samples_per_chunk < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("rechunk: samples per chunk must be >= 1 (or 0: about 1 MiB), not {}",
                            options.samples_per_chunk));
  }
  for (const std::string* path : {&options.input, &options.output}) {
    if (IsUriPath(*path)) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("rechunk: {}: rechunk reads and writes local files; copy the "
                              "object first",
                              *path));
    }
  }
  const PathFacts in = Stat(options.input);
  if (!in.exists) {
    throw Error(ErrorCode::kNotFound, fmt::format("{}: no such file", options.input));
  }
  const PathFacts out = Stat(options.output);
  if (out.exists && out.dev == in.dev && out.ino == in.ino) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("rechunk: the output {} is the input file; write to another path",
                            options.output));
  }
  if (out.exists && !options.force) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("rechunk: {} exists; pass --force to replace it", options.output));
  }
  const std::string folder = FolderOf(options.output);
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(ErrorCode::kNotFound,
                fmt::format("rechunk: the output's folder {} does not exist", folder));
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    throw Error(ErrorCode::kIo,
                fmt::format("rechunk: cannot write in {}: {}", folder, std::strerror(errno)));
  }
}

// The temporary output: removed on every way out but a successful rename.
class TemporaryOutput {
 public:
  explicit TemporaryOutput(const std::string& output)
      : path_(fmt::format("{}.gpufeed-tmp-{}", output, ::getpid())) {}
  ~TemporaryOutput() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TemporaryOutput(const TemporaryOutput&) = delete;
  TemporaryOutput& operator=(const TemporaryOutput&) = delete;

  const std::string& path() const { return path_; }

  // Flushes the file to storage, then renames it over `output`.
  void Commit(const std::string& output) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int saved = errno;
      if (fd >= 0) ::close(fd);
      throw Error(ErrorCode::kIo,
                  fmt::format("rechunk: flushing {}: {}", path_, std::strerror(saved)));
    }
    ::close(fd);
    if (::rename(path_.c_str(), output.c_str()) != 0) {
      throw Error(ErrorCode::kIo, fmt::format("rechunk: renaming {} to {}: {}", path_, output,
                                              std::strerror(errno)));
    }
    committed_ = true;
  }

 private:
  std::string path_;
  bool committed_ = false;
};

Hdf5Id CreateOutput(const std::string& path) {
  Hdf5Lock lock;
  Hdf5Id id(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT));
  if (!id.valid()) {
    throw Error(ErrorCode::kIo,
                fmt::format("rechunk: cannot create {}: {}", path, Hdf5ErrorMessage()));
  }
  return id;
}

// One row of `dataset` (its own type: no conversion) into `out`.
void ReadRow(hid_t dataset, hid_t type, hsize_t row, std::vector<std::byte>& out,
             const std::string& what) {
  Hdf5Id space(H5Dget_space(dataset));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<hsize_t> start(dims.size(), 0);
  start[0] = row;
  dims[0] = 1;
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, dims.data(), nullptr);
  Hdf5Id memory(H5Screate_simple(rank, dims.data(), nullptr));
  if (H5Dread(dataset, type, memory.get(), space.get(), H5P_DEFAULT, out.data()) < 0) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("rechunk: {}: reading row {}: {}", what, row, Hdf5ErrorMessage()));
  }
}

int64_t VerifyDataset(hid_t input, hid_t output, const RechunkDataset& entry, int64_t wanted,
                      const std::string& output_path) {
  Hdf5Id in(H5Dopen2(input, entry.path.c_str(), H5P_DEFAULT));
  Hdf5Id out(H5Dopen2(output, entry.path.c_str(), H5P_DEFAULT));
  if (!in.valid() || !out.valid()) {
    throw Error(ErrorCode::kCorruptData, fmt::format("rechunk: {} is missing from {}: {}",
                                                     entry.path, output_path, Hdf5ErrorMessage()));
  }
  Hdf5Id type(H5Dget_type(in.get()));
  Hdf5Id space(H5Dget_space(in.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 1)), 0);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  uint64_t row_bytes = H5Tget_size(type.get());
  for (size_t d = 1; d < dims.size(); ++d) row_bytes *= dims[d];  // checked when copied
  const hsize_t rows = dims[0];
  const hsize_t picks = std::min<hsize_t>(rows, static_cast<hsize_t>(std::max<int64_t>(wanted, 0)));
  std::vector<std::byte> a(row_bytes), b(row_bytes);
  for (hsize_t i = 0; i < picks; ++i) {
    const hsize_t row = picks == 1 ? 0 : i * (rows - 1) / (picks - 1);
    ReadRow(in.get(), type.get(), row, a, entry.path);
    ReadRow(out.get(), type.get(), row, b, output_path + ":" + entry.path);
    if (std::memcmp(a.data(), b.data(), row_bytes) != 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("rechunk: {}: row {} of the rewritten file differs from the "
                              "input; nothing was written",
                              entry.path, row));
    }
  }
  return static_cast<int64_t>(picks);
}

// Refuses, before anything is written, an output the output's file system has no room for.
// The size is an estimate: the input's size when its compression is kept or another is asked
// for (compressed sizes cannot be known before compressing), else the samples' bytes.
void CheckSpace(const RechunkOptions& options, const Hdf5Compression& compression,
                uint64_t sample_bytes) {
  struct stat in {};
  struct statvfs fs {};
  if (::stat(options.input.c_str(), &in) != 0 ||
      ::statvfs(FolderOf(options.output).c_str(), &fs) != 0) {
    return;  // unknown: the write itself will tell
  }
  const uint64_t input_bytes = static_cast<uint64_t>(in.st_size);
  const uint64_t needed = compression.kind == Hdf5Compression::Kind::kNone
                              ? std::max(sample_bytes, input_bytes)
                              : std::min(std::max(sample_bytes, uint64_t{1}), input_bytes);
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < needed) {
    throw Error(ErrorCode::kIo,
                fmt::format("rechunk: {} needs about {} MB and its file system has {} MB free",
                            options.output, needed >> 20, free_bytes >> 20));
  }
}

}  // namespace

int64_t VerifyRechunked(hid_t input, const std::string& path, const RechunkReport& report,
                        const RechunkOptions& options) {
  Hdf5Id output(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!output.valid()) {
    throw Error(ErrorCode::kIo,
                fmt::format("rechunk: reopening {} to check it: {}", path, Hdf5ErrorMessage()));
  }
  int64_t verified = 0;
  for (const RechunkDataset& entry : report.datasets) {
    if (entry.how != "rechunked") continue;
    verified += VerifyDataset(input, output.get(), entry, options.verify_rows, path);
  }
  return verified;
}

RechunkReport RechunkHdf5(const RechunkOptions& options, const RechunkProgress& progress) {
  CheckPaths(options);
  const Hdf5Compression compression = ParseHdf5Compression(options.compression);
  Hdf5Id input = OpenHdf5File(PosixFileSystem()->Open(options.input));
  // One thread does the whole rewrite: it holds the libhdf5 lock throughout (recursive).
  Hdf5Lock lock;

  const uint64_t dataset_bytes = CountDatasetBytes(input.get());
  CheckSpace(options, compression, dataset_bytes);
  TemporaryOutput temporary(options.output);
  RechunkReport report;
  {
    Hdf5Id output = CreateOutput(temporary.path());
    Hdf5TreeCopier copier(input.get(), output.get(), options, compression, dataset_bytes, progress);
    copier.CopyAll(&report);
    // Release the copier's ids before the file closes, so the close flushes everything.
    copier.Close();
    if (H5Fflush(output.get(), H5F_SCOPE_GLOBAL) < 0) {
      throw Error(ErrorCode::kIo,
                  fmt::format("rechunk: writing {}: {}", temporary.path(), Hdf5ErrorMessage()));
    }
  }
  report.rows_verified = VerifyRechunked(input.get(), temporary.path(), report, options);
  temporary.Commit(options.output);
  return report;
}

}  // namespace gpufeed
