// The Megatron-LM / NeMo indexed data set as a Source (OpenIndexed, gpufeed/varlen.h): one
// variable-length field `tokens`, one sample per sequence of the `.idx`, its items copied from
// the `.bin`'s mapping (or read with pread where the file does not map: a remote object).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/io/mapped_read_guard.h"
#include "core/io/missing_path.h"
#include "core/path_names.h"
#include "gpufeed/error.h"
#include "gpufeed/varlen.h"
#include "sources/indexed/index_format.h"

namespace gpufeed {
namespace {

// "412345", "201.3M", "1.2B": a count of items for people.
std::string FormatCount(int64_t n) {
  if (n < 10000) return fmt::format("{}", n);
  const char* units[] = {"K", "M", "B", "T"};
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1000 && u < 3) {
    v /= 1000;
    ++u;
  }
  return v < 100 ? fmt::format("{:.1f}{}", v, units[u]) : fmt::format("{:.0f}{}", v, units[u]);
}

// One of the two files, opened through the file system: the File, its bytes where they map
// (or, for the .idx that does not map, a copy), and its size.
struct IndexedFile {
  std::unique_ptr<File> file;
  const uint8_t* bytes = nullptr;
  std::vector<uint8_t> copy;  // the .idx's bytes where it does not map
  bool mapped = false;
  uint64_t size = 0;
};

class IndexedSource final : public Source {
 public:
  IndexedSource(std::string prefix, IndexedFile idx, IndexedFile bin, IndexedHeader header,
                IndexedTotals totals)
      : prefix_(std::move(prefix)),
        idx_(std::move(idx)),
        bin_(std::move(bin)),
        header_(header),
        totals_(totals) {
    schema_.fields.push_back({"tokens", header_.dtype, {kVariableDim}});
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return header_.sequences; }

  std::string Describe() const override {
    return fmt::format("indexed:{} ({} sequences in {} documents, {} tokens, {})", prefix_,
                       header_.sequences, header_.documents - 1, FormatCount(totals_.items),
                       DTypeName(header_.dtype));
  }

  std::string Identity() const override {
    std::string id = fmt::format("indexed:{}|{}", IdentityPath(prefix_), schema_.ToString());
    for (const IndexedFile* f : {&idx_, &bin_}) {
      id += fmt::format("|{}:{}:{}", IdentityPath(f->file->path()), f->size,
                        f->file->ModificationTimeNs());
      if (const std::string stamp = f->file->VersionStamp(); !stamp.empty()) {
        id += fmt::format("|stamp:{}={}", IdentityPath(f->file->path()), stamp);
      }
    }
    return id;
  }

  // The only field is variable-length: ReadItems serves it, Read has nothing to copy.
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* /*state*/) const override {
    CheckReadRequest(*this, indices, out);
  }

  void ReadLengths(int field, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState* /*state*/) const override {
    CheckField(field);
    GPUFEED_ASSERT(lengths.size() == indices.size(), "ReadLengths: one length per index");
    for (int64_t index : indices) CheckSampleIndex(*this, index);
    const uint8_t* at = idx_.bytes + header_.lengths_at;
    GuardIdx([&] {
      for (size_t i = 0; i < indices.size(); ++i) {
        lengths[i] = LoadLe32(at + static_cast<uint64_t>(indices[i]) * 4);
      }
    });
  }

  void ReadItems(int field, int64_t index, int64_t first, std::span<std::byte> out,
                 SourceWorkerState* /*state*/) const override {
    CheckSampleIndex(*this, index);
    int64_t length = 0;
    int64_t pointer = 0;
    const uint64_t i = static_cast<uint64_t>(index);
    GuardIdx([&] {
      length = LoadLe32(idx_.bytes + header_.lengths_at + i * 4);
      pointer = LoadLe64(idx_.bytes + header_.pointers_at + i * 8);
    });
    const int64_t count = CheckItemsRequest(*this, field, index, first, out, length);
    if (count == 0) return;
    // Within the .bin: checked at open for every sequence's whole length.
    const uint64_t offset =
        static_cast<uint64_t>(pointer) + static_cast<uint64_t>(first) * header_.item_bytes;
    const size_t bytes = out.size();
    if (bin_.mapped) {
      GuardMappedRead(bin_.file->path(),
                      [&] { std::memcpy(out.data(), bin_.bytes + offset, bytes); });
      return;
    }
    try {
      ReadFully(*bin_.file, offset, out.data(), bytes, fmt::format("sequence {}", index));
    } catch (const Error& e) {
      throw Error(e.code(),
                  fmt::format("{}: cannot read sequence {}: {}", Describe(), index, e.what()));
    }
  }

  // A batch's pieces under two guards in all (the .idx's entries, then the copies), not two
  // per piece: a guard costs a sigprocmask.
  void ReadItemsMany(int field, std::span<const ItemsRequest> requests,
                     SourceWorkerState* state) const override {
    if (!bin_.mapped) {
      for (const ItemsRequest& r : requests) ReadItems(field, r.index, r.first, r.out, state);
      return;
    }
    CheckField(field);
    for (const ItemsRequest& r : requests) CheckSampleIndex(*this, r.index);
    std::vector<uint64_t> offsets(requests.size());
    std::vector<int64_t> lengths(requests.size());
    GuardIdx([&] {
      for (size_t k = 0; k < requests.size(); ++k) {
        const uint64_t i = static_cast<uint64_t>(requests[k].index);
        lengths[k] = LoadLe32(idx_.bytes + header_.lengths_at + i * 4);
        offsets[k] = static_cast<uint64_t>(LoadLe64(idx_.bytes + header_.pointers_at + i * 8));
      }
    });
    for (size_t k = 0; k < requests.size(); ++k) {
      const ItemsRequest& r = requests[k];
      CheckItemsRequest(*this, field, r.index, r.first, r.out, lengths[k]);
      // Within the .bin: checked at open for every sequence's whole length.
      offsets[k] += static_cast<uint64_t>(r.first) * header_.item_bytes;
    }
    GuardMappedRead(bin_.file->path(), [&] {
      for (size_t k = 0; k < requests.size(); ++k) {
        if (!requests[k].out.empty()) {
          std::memcpy(requests[k].out.data(), bin_.bytes + offsets[k], requests[k].out.size());
        }
      }
    });
  }

 private:
  template <typename Copy>
  void GuardIdx(Copy&& copy) const {
    if (idx_.mapped) {
      GuardMappedRead(idx_.file->path(), copy);
    } else {
      copy();
    }
  }

  void CheckField(int field) const {
    if (field != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: field number {} is not a variable-length field (the only "
                              "field is 0, tokens)",
                              Describe(), field));
    }
  }


  const std::string prefix_;
  const IndexedFile idx_;
  const IndexedFile bin_;
  const IndexedHeader header_;
  const IndexedTotals totals_;
  Schema schema_;
};

// `prefix` less a trailing ".idx" or ".bin": the data set's prefix, whichever file was named.
std::string IndexedPrefix(const std::string& path) {
  for (const char* ext : {".idx", ".bin"}) {
    if (path.size() > 4 && path.ends_with(ext)) return path.substr(0, path.size() - 4);
  }
  return path;
}

IndexedFile OpenPart(const FileSystem& fs, const std::string& prefix, const char* ext) {
  const std::string path = prefix + ext;
  if (fs.Type(path) == PathType::kMissing) {
    ThrowMissing(fs, path,
                 fmt::format("{}: the indexed data set {} has no {} file (it needs {}.idx and "
                             "{}.bin)",
                             path, prefix, ext, prefix, prefix));
  }
  IndexedFile f;
  f.file = fs.Open(path);
  f.size = f.file->Size();
  const std::byte* map = f.file->Map();
  if (map != nullptr) {
    f.bytes = reinterpret_cast<const uint8_t*>(map);
    f.mapped = true;
  }
  return f;
}

// The .idx's bytes where it does not map: a copy, as large as the file (never as large as a
// count read from it claims).
void CopyUnmappedIndex(IndexedFile& idx) {
  if (idx.mapped) return;
  idx.copy.resize(idx.size);
  ReadFully(*idx.file, 0, idx.copy.data(), idx.copy.size(), "the index");
  idx.bytes = idx.copy.data();
}

}  // namespace

std::shared_ptr<Source> OpenIndexed(const std::string& prefix_or_file,
                                    std::shared_ptr<const FileSystem> fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  const std::string prefix = IndexedPrefix(prefix_or_file);
  IndexedFile idx = OpenPart(*fs, prefix, ".idx");
  IndexedFile bin = OpenPart(*fs, prefix, ".bin");
  const std::string& idx_path = idx.file->path();
  uint8_t head[kIndexedHeaderBytes] = {};
  const size_t head_bytes = static_cast<size_t>(std::min<uint64_t>(idx.size, sizeof(head)));
  ReadFully(*idx.file, 0, head, head_bytes, "the header");
  const IndexedHeader header =
      ParseIndexedHeader(std::span<const uint8_t>(head, head_bytes), idx.size, idx_path);
  CopyUnmappedIndex(idx);
  const IdxReader read = [&](uint64_t offset, void* dst, size_t n) {
    // Within the file: the header's counts were checked against its size.
    if (idx.mapped) {
      GuardMappedRead(idx_path, [&] { std::memcpy(dst, idx.bytes + offset, n); });
    } else {
      std::memcpy(dst, idx.bytes + offset, n);
    }
  };
  const IndexedTotals totals =
      CheckIndexedArrays(header, read, bin.size, idx_path, bin.file->path());
  return std::make_shared<IndexedSource>(prefix, std::move(idx), std::move(bin), header, totals);
}

}  // namespace gpufeed
