// libFuzzer target: a .npy file (header and data) opened as a one-field NumPy source and read,
// through a mapping and through ReadAt. The input is served from memory by a FileSystem
// that returns it for any path, so no file is written per input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/sources.h"

namespace {

class MemoryFile final : public gpufeed::File {
 public:
  MemoryFile(std::string path, const std::vector<std::byte>& bytes, bool map)
      : path_(std::move(path)), bytes_(bytes), map_(map) {}
  const std::string& path() const override { return path_; }
  uint64_t Size() const override { return bytes_.size(); }
  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    if (offset >= bytes_.size()) return 0;
    n = std::min<uint64_t>(n, bytes_.size() - offset);
    std::memcpy(buf, bytes_.data() + offset, n);
    return n;
  }
  const std::byte* Map() const override { return map_ ? bytes_.data() : nullptr; }

 private:
  std::string path_;
  const std::vector<std::byte>& bytes_;
  bool map_;
};

class MemoryFileSystem final : public gpufeed::FileSystem {
 public:
  MemoryFileSystem(const std::vector<std::byte>& bytes, bool map) : bytes_(bytes), map_(map) {}
  std::unique_ptr<gpufeed::File> Open(const std::string& path) const override {
    return std::make_unique<MemoryFile>(path, bytes_, map_);
  }
  // One folder (any path without a name ending in .npy) holding the one file x.npy.
  gpufeed::PathType Type(const std::string& path) const override {
    return path.ends_with(".npy") ? gpufeed::PathType::kFile : gpufeed::PathType::kDirectory;
  }
  std::vector<gpufeed::DirEntry> List(const std::string&) const override {
    return {{"x.npy", gpufeed::PathType::kFile, bytes_.size()}};
  }

 private:
  const std::vector<std::byte>& bytes_;
  bool map_;
};

const std::string& Folder() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/gpufeed-npy-fuzz-XXXXXX";
    const char* made = mkdtemp(tmpl);
    if (made == nullptr) std::abort();
    return std::string(made);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy: ASan sees any read past the file's end.
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  for (bool map : {true, false}) {
    try {
      auto fs = std::make_shared<MemoryFileSystem>(bytes, map);
      auto source =
          gpufeed::OpenNumpy(Folder(), {.fields = {"x"}, .file_system = fs, .use_mmap = map});
      const int64_t n = source->size();
      if (n <= 0) continue;
      const size_t row = source->schema().SampleBytes();
      std::vector<int64_t> indices = {n - 1, 0, n / 2, n - 1};
      if (row > (size_t{1} << 24)) continue;  // valid, but too large to read here
      std::vector<std::byte> out(row * indices.size());
      gpufeed::BatchView view{.fields = {out.data()}, .rows = static_cast<int64_t>(indices.size())};
      auto state = source->NewWorkerState();
      source->Read(indices, view, state.get());
    } catch (const gpufeed::Error&) {
      // Rejected with a gpufeed error: what a bad file must get.
    }
  }
  return 0;
}
