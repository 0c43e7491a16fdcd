#include "cli/demo_data.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "pipeline/random.h"
#include "sources/npy_header.h"

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
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) Fail("cannot write");
      p += w;
      n -= static_cast<size_t>(w);
    }
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

}  // namespace

std::string DefaultDemoFolder() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fmt::format("{}/gpufeed/demo-mel", xdg);
  }
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.cache/gpufeed/demo-mel", home != nullptr ? home : "/tmp");
}

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
      for (int64_t s = 0; s < n; ++s) {
        const int64_t sample = start + s;
        const int64_t cls = LabelOf(sample);
        labels[static_cast<size_t>(s)] = cls;
        Pcg32 rng(Mix64(static_cast<uint64_t>(sample) ^ 0xdeadbeefULL));
        float* out = values.data() + s * kBins * kFrames;
        for (int64_t f = 0; f < kBins; ++f) {
          // Log-mel-like: a falling spectrum, noise, and this class's band lit up.
          const float base = -4.0f - 0.05f * static_cast<float>(f);
          const float lit = (f / kBand == cls) ? 3.0f : 0.0f;
          for (int64_t t = 0; t < kFrames; ++t) {
            out[f * kFrames + t] = base + lit + 1.5f * rng.Uniform();
          }
        }
      }
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

}  // namespace gpufeed::cli
