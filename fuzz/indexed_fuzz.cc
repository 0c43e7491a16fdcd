// libFuzzer target: a Megatron indexed data set's .idx (the input) beside a .bin of 4 KiB,
// opened with OpenIndexed and read (every length, the items of a few sequences), through a
// mapping and through ReadAt. Both files are served from memory by a FileSystem, so no file is
// written per input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/varlen.h"

namespace {

constexpr size_t kBinBytes = 4096;

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

// x.idx is the input, x.bin a fixed 4 KiB; nothing else exists.
class MemoryFileSystem final : public gpufeed::FileSystem {
 public:
  MemoryFileSystem(const std::vector<std::byte>& idx, const std::vector<std::byte>& bin, bool map)
      : idx_(idx), bin_(bin), map_(map) {}
  std::unique_ptr<gpufeed::File> Open(const std::string& path) const override {
    if (path == "x.idx") return std::make_unique<MemoryFile>(path, idx_, map_);
    if (path == "x.bin") return std::make_unique<MemoryFile>(path, bin_, map_);
    throw gpufeed::Error(gpufeed::ErrorCode::kNotFound, path + ": no such file");
  }
  gpufeed::PathType Type(const std::string& path) const override {
    return path == "x.idx" || path == "x.bin" ? gpufeed::PathType::kFile
                                              : gpufeed::PathType::kMissing;
  }
  std::vector<gpufeed::DirEntry> List(const std::string&) const override { return {}; }

 private:
  const std::vector<std::byte>& idx_;
  const std::vector<std::byte>& bin_;
  bool map_;
};

const std::vector<std::byte>& Bin() {
  static const std::vector<std::byte> bin = [] {
    std::vector<std::byte> b(kBinBytes);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 131 + 7);
    return b;
  }();
  return bin;
}

void ReadSome(const gpufeed::Source& source) {
  const int64_t n = source.size();
  if (n <= 0) return;
  // Every length (bounded: a valid index of many empty sequences may be large).
  std::vector<int64_t> indices(static_cast<size_t>(std::min<int64_t>(n, 4096)));
  std::iota(indices.begin(), indices.end(), n - static_cast<int64_t>(indices.size()));
  std::vector<int64_t> lengths(indices.size());
  source.ReadLengths(0, indices, lengths, nullptr);
  const size_t item = source.schema().fields[0].ItemBytes();
  std::vector<std::byte> out;
  for (int64_t index : {int64_t{0}, n / 2, n - 1}) {
    int64_t length = 0;
    source.ReadLengths(0, {&index, 1}, {&length, 1}, nullptr);
    out.resize(static_cast<size_t>(length) * item);  // within the 4 KiB .bin: checked at open
    source.ReadItems(0, index, 0, out, nullptr);
    if (length > 1) {
      out.resize(static_cast<size_t>(length - 1) * item);
      source.ReadItems(0, index, 1, out, nullptr);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy: ASan sees any read past the index's end.
  std::vector<std::byte> idx(reinterpret_cast<const std::byte*>(data),
                             reinterpret_cast<const std::byte*>(data) + size);
  for (bool map : {true, false}) {
    try {
      auto fs = std::make_shared<MemoryFileSystem>(idx, Bin(), map);
      auto source = gpufeed::OpenIndexed("x", fs);
      source->Describe();
      ReadSome(*source);
    } catch (const gpufeed::Error&) {
      // Rejected with a gpufeed error: what a bad index must get.
    }
  }
  return 0;
}
