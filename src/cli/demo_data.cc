#include "cli/demo_data.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/io/fd_io.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/sources.h"
#include "pipeline/random.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/numpy/npy_header.h"

namespace gpufeed::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBins = 64;
constexpr int64_t kFrames = 32;
constexpr int64_t kBand = kBins / kDemoClasses;  // 6 bins per class

int64_t LabelOf(int64_t sample) { return static_cast<int64_t>(Mix64(static_cast<uint64_t>(sample)) % kDemoClasses); }

// A file written front to back through one descriptor, with errors naming the path.
class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) Fail("cannot create");
  }
  ~Writer() {
    if (fd_ >= 0) ::close(fd_);
  }
  void Write(const void* data, size_t n) {
    if (!WriteAll(fd_, data, n)) Fail("cannot write");
  }
  void Close() {
    if (::close(fd_) != 0) Fail("cannot close");
    fd_ = -1;
  }

 private:
  [[noreturn]] void Fail(const char* what) {
    throw Error(ErrorCode::kIo, fmt::format("{} {}: {}", what, path_, std::strerror(errno)));
  }
  std::string path_;
  int fd_ = -1;
};

// Samples [start, start + n): n mel segments into `values`, their classes into `labels`.
void MakeSamples(int64_t start, int64_t n, float* values, int64_t* labels) {
  for (int64_t s = 0; s < n; ++s) {
    const int64_t sample = start + s;
    const int64_t cls = LabelOf(sample);
    labels[s] = cls;
    Pcg32 rng(Mix64(static_cast<uint64_t>(sample) ^ 0xdeadbeefULL));
    float* out = values + s * kBins * kFrames;
    for (int64_t f = 0; f < kBins; ++f) {
      // Log-mel-like: a falling spectrum, noise, and this class's band lit up.
      const float base = -4.0f - 0.05f * static_cast<float>(f);
      const float lit = (f / kBand == cls) ? 3.0f : 0.0f;
      for (int64_t t = 0; t < kFrames; ++t) {
        out[f * kFrames + t] = base + lit + 1.5f * rng.Uniform();
      }
    }
  }
}

std::string CacheFolder() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fmt::format("{}/gpufeed", xdg);
  }
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.cache/gpufeed", home != nullptr ? home : "/tmp");
}

[[noreturn]] void Hdf5Failed(const std::string& what, const std::string& path) {
  throw Error(ErrorCode::kIo, fmt::format("cannot {} {}: {}", what, path, Hdf5ErrorMessage()));
}

}  // namespace

std::string DefaultDemoFile() { return CacheFolder() + "/demo-mel.h5"; }

std::vector<int64_t> H5pyGuessChunk(const std::vector<int64_t>& shape, size_t element_size) {
  constexpr double kBase = 16 * 1024, kMin = 8 * 1024, kMax = 1024 * 1024;
  std::vector<double> chunks;
  double elements = 1;
  for (int64_t d : shape) {
    chunks.push_back(d == 0 ? 1024.0 : static_cast<double>(d));  // as h5py: 0 counts as 1024
    elements *= chunks.back();
  }
  if (chunks.empty()) return {};
  const double es = static_cast<double>(element_size);
  double target = kBase * std::pow(2.0, std::log10(elements * es / (1024.0 * 1024.0)));
  target = std::clamp(target, kMin, kMax);
  for (size_t idx = 0;; ++idx) {
    double n = 1;
    for (double c : chunks) n *= c;
    const double bytes = n * es;
    if ((bytes < target || std::abs(bytes - target) / target < 0.5) && bytes < kMax) break;
    if (n == 1) break;
    double& c = chunks[idx % chunks.size()];
    c = std::ceil(c / 2.0);
  }
  return std::vector<int64_t>(chunks.begin(), chunks.end());
}

std::string DefaultDemoFolder() { return CacheFolder() + "/demo-mel"; }

bool DemoSetExists(const std::string& folder, int64_t samples) {
  try {
    auto source = OpenNumpy(folder, {.fields = {"mel", "label"}});
    return source->size() == samples &&
           source->schema().Field("mel").shape == std::vector<int64_t>{1, kBins, kFrames};
  } catch (const Error&) {
    return false;
  }
}

void MakeDemoSet(const std::string& folder, int64_t samples,
                 const std::function<void(double)>& on_progress) {
  const fs::path final_path(folder);
  const fs::path tmp = final_path.string() + fmt::format(".tmp-{}", ::getpid());
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) {
    throw Error(ErrorCode::kIo, fmt::format("cannot create {}: {}", tmp.string(), ec.message()));
  }
  {
    Writer mel((tmp / "mel.npy").string());
    Writer label((tmp / "label.npy").string());
    const std::string mel_header = FormatNpyHeader(DType::kFloat32, {samples, 1, kBins, kFrames});
    const std::string label_header = FormatNpyHeader(DType::kInt64, {samples});
    mel.Write(mel_header.data(), mel_header.size());
    label.Write(label_header.data(), label_header.size());
    constexpr int64_t kChunk = 4096;
    std::vector<float> values(static_cast<size_t>(kChunk * kBins * kFrames));
    std::vector<int64_t> labels(static_cast<size_t>(kChunk));
    for (int64_t start = 0; start < samples; start += kChunk) {
      const int64_t n = std::min(kChunk, samples - start);
      MakeSamples(start, n, values.data(), labels.data());
      mel.Write(values.data(), static_cast<size_t>(n * kBins * kFrames) * sizeof(float));
      label.Write(labels.data(), static_cast<size_t>(n) * sizeof(int64_t));
      if (on_progress) on_progress(static_cast<double>(start + n) / static_cast<double>(samples));
    }
    mel.Close();
    label.Close();
  }
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) {
    throw Error(ErrorCode::kIo, fmt::format("cannot move {} to {}: {}", tmp.string(),
                                            final_path.string(), ec.message()));
  }
}

bool DemoHdf5Exists(const std::string& path, int64_t samples) {
  try {
    auto source = OpenHdf5({path}, {"mel", "label"});
    if (source->size() != samples ||
        source->schema().Field("mel").shape != std::vector<int64_t>{1, kBins, kFrames}) {
      return false;
    }
    // A copy in another layout (contiguous, other chunks) is not the demo's set.
    const Hdf5Inspection in = InspectHdf5(path, nullptr, 0);
    for (const auto& d : in.datasets) {
      if (d.dataset == "/mel" &&
          d.chunk_shape == H5pyGuessChunk({samples, 1, kBins, kFrames}, sizeof(float))) {
        return true;
      }
    }
    return false;
  } catch (const Error&) {
    return false;
  }
}

void MakeDemoHdf5(const std::string& path, int64_t samples,
                  const std::function<void(double)>& on_progress) {
  const fs::path final_path(path);
  std::error_code ec;
  fs::create_directories(final_path.parent_path(), ec);
  const std::string tmp = path + fmt::format(".tmp-{}", ::getpid());
  try {
    Hdf5Lock lock;
    Hdf5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) Hdf5Failed("create", tmp);
    // One dataset: `shape`, chunked as h5py guesses, of `type`.
    auto create = [&](const char* name, const std::vector<int64_t>& shape, hid_t type,
                      size_t element_size) {
      const std::vector<hsize_t> dims(shape.begin(), shape.end());
      const std::vector<int64_t> guess = H5pyGuessChunk(shape, element_size);
      const std::vector<hsize_t> chunk(guess.begin(), guess.end());
      Hdf5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
      Hdf5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
      if (!space.valid() || !dcpl.valid() ||
          H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0) {
        Hdf5Failed(fmt::format("lay out {} in", name), tmp);
      }
      Hdf5Id ds(H5Dcreate2(file.get(), name, type, space.get(), H5P_DEFAULT, dcpl.get(),
                           H5P_DEFAULT));
      if (!ds.valid()) Hdf5Failed(fmt::format("create dataset {} in", name), tmp);
      return std::make_pair(std::move(ds), static_cast<int64_t>(guess[0]));
    };
    auto [mel, rows] = create("mel", {samples, 1, kBins, kFrames}, H5T_NATIVE_FLOAT, sizeof(float));
    auto [label, label_rows] = create("label", {samples}, H5T_NATIVE_INT64, sizeof(int64_t));
    (void)label_rows;
    // Whole chunk rows at a time (the chunk's first axis), so libhdf5 writes each chunk once.
    const int64_t step = std::max<int64_t>(rows, 1);
    std::vector<float> values(static_cast<size_t>(step * kBins * kFrames));
    std::vector<int64_t> labels(static_cast<size_t>(step));
    // Writes rows [start, start + n) of `ds` (rank `rank`) from `data`.
    auto write = [&](const Hdf5Id& ds, int rank, int64_t start, int64_t n, hid_t type,
                     const void* data) {
      std::vector<hsize_t> offset(rank, 0), count = {static_cast<hsize_t>(n)};
      if (rank == 4) count = {static_cast<hsize_t>(n), 1, kBins, kFrames};
      offset[0] = static_cast<hsize_t>(start);
      Hdf5Id file_space(H5Dget_space(ds.get()));
      Hdf5Id memory(H5Screate_simple(rank, count.data(), nullptr));
      if (!file_space.valid() || !memory.valid() ||
          H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset.data(), nullptr,
                              count.data(), nullptr) < 0 ||
          H5Dwrite(ds.get(), type, memory.get(), file_space.get(), H5P_DEFAULT, data) < 0) {
        Hdf5Failed("write", tmp);
      }
    };
    for (int64_t start = 0; start < samples; start += step) {
      const int64_t n = std::min(step, samples - start);
      MakeSamples(start, n, values.data(), labels.data());
      write(mel, 4, start, n, H5T_NATIVE_FLOAT, values.data());
      write(label, 1, start, n, H5T_NATIVE_INT64, labels.data());
      if (on_progress) on_progress(static_cast<double>(start + n) / static_cast<double>(samples));
    }
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) Hdf5Failed("write", tmp);
  } catch (...) {
    fs::remove(tmp, ec);  // never a half-written set left behind
    throw;
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp);
    throw Error(ErrorCode::kIo, fmt::format("cannot move {} to {}: {}", tmp, path, ec.message()));
  }
}

}  // namespace gpufeed::cli
