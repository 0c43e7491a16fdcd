#include "sources/hdf5/index/chunk_index.h"

#include <fmt/format.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <unordered_set>

#include "core/checked_math.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/index/chunk_index_v4.h"

namespace gpufeed {
namespace {

constexpr uint16_t kLayoutMessage = 0x0008;
constexpr uint16_t kContinuationMessage = 0x0010;
constexpr int kMaxContinuations = 4096;  // a loop guard; real headers have a handful
constexpr int kMaxTreeLevel = 64;

class IndexReader {
 public:
  IndexReader(const File& file, const Hdf5ObjectLocation& where, const Hdf5ChunkGrid& grid,
              const std::string& what)
      : file_(file),
        where_(where),
        grid_(grid),
        rank_(static_cast<int>(grid.grid.size())),
        max_chunks_(grid.grid_total),
        // A real tree has at most one leaf per chunk and fewer inner nodes than leaves.
        max_nodes_(2 * std::min<uint64_t>(max_chunks_, uint64_t{1} << 40) + kMaxTreeLevel + 1),
        what_(what) {
    for (unsigned width : {where.sizeof_addr, where.sizeof_size}) {
      if (width != 2 && width != 4 && width != 8) {
        throw Error(ErrorCode::kUnsupported,
                    fmt::format("{}: the file's offsets or lengths are {} bytes wide (gpufeed "
                                "reads 2, 4 or 8)",
                                what, width));
      }
    }
  }

  std::optional<Hdf5ChunkList> Read() {
    std::vector<uint8_t> layout;
    if (!FindLayoutMessage(layout)) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the object header has no data layout message", what_));
    }
    const Bytes f(layout, &what_);
    if (f.Uint(0, 1) == 4 && f.Uint(1, 1) == 2) {
      Hdf5MetadataReader r(file_, where_, what_);
      const std::string name = what_ + ": data layout message";
      return ReadV4ChunkIndex(r, Bytes(layout, &name), grid_);
    }
    // Version 3, class 2 (chunked): dimensionality, B-tree address, chunk dims. Versions 1
    // and 2 (HDF5 1.6 and older): dimensionality, class, 5 reserved bytes, B-tree address.
    const uint64_t version = f.Uint(0, 1);
    uint64_t dimensionality = 0, root = 0;
    if (version == 3 && f.Uint(1, 1) == 2) {
      dimensionality = f.Uint(2, 1);
      root = f.Uint(3, where_.sizeof_addr);
    } else if ((version == 1 || version == 2) && f.Uint(2, 1) == 2) {
      dimensionality = f.Uint(1, 1);
      root = f.Uint(8, where_.sizeof_addr);
    } else {
      return std::nullopt;
    }
    if (dimensionality != static_cast<uint64_t>(rank_) + 1) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunked layout has {} dimensions for a rank-{} dataset",
                              what_, dimensionality, rank_));
    }
    Hdf5ChunkList list;
    list.method = "v1 B-tree, read directly";
    if (!IsUndefined(root)) Walk(root, -1, list.chunks);
    return list;
  }

  // The absolute file offset `relative` + `plus` names, or a damaged-file error when the sum
  // does not fit.
  uint64_t Offset(uint64_t relative, uint64_t plus = 0) const {
    const auto a = CheckedAdd(relative, plus);
    const auto b = a ? CheckedAdd(where_.base_address, *a) : std::nullopt;
    if (!b) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: metadata offset {} + {} lies past the end of the file ({} "
                              "bytes)",
                              what_, relative, plus, file_.Size()));
    }
    return *b - where_.base_address;
  }

 private:
  bool IsUndefined(uint64_t addr) const {
    return where_.sizeof_addr >= 8 ? addr == ~uint64_t{0}
                                   : addr == (uint64_t{1} << (8 * where_.sizeof_addr)) - 1;
  }

  std::vector<uint8_t> ReadBytes(uint64_t relative, uint64_t n) {
    const uint64_t absolute = Offset(relative) + where_.base_address;
    if (n > (uint64_t{1} << 30) || absolute > file_.Size() || n > file_.Size() - absolute) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: metadata at offset {} ({} bytes) lies past the end of the "
                              "file ({} bytes): truncated file?",
                              what_, absolute, n, file_.Size()));
    }
    std::vector<uint8_t> out(n);
    ReadFully(file_, absolute, out.data(), n, what_ + " metadata");
    return out;
  }

  // Scans the object header (version 1 or 2) and its continuation blocks for the layout.
  bool FindLayoutMessage(std::vector<uint8_t>& layout) {
    std::vector<uint8_t> head = ReadBytes(where_.header_address, 16);
    const Bytes h(head, &what_);
    struct Block {
      uint64_t address, length;
    };
    std::vector<Block> pending;
    std::unordered_set<uint64_t> continuations;
    bool v2 = false;
    bool track_order = false;
    if (h.Signature(0, "OHDR")) {
      v2 = true;
      const ObjectHeaderV2Prefix header = ParseObjectHeaderV2Prefix(h.Uint(5, 1));
      track_order = header.tracks_attribute_order;
      const size_t pos = header.chunk0_size_at;
      const size_t width = header.chunk0_size_width;
      head = ReadBytes(where_.header_address, pos + width);
      const uint64_t chunk0 = Bytes(head, &what_).Uint(pos, width);
      pending.push_back({Offset(where_.header_address, pos + width), chunk0});
    } else if (h.Uint(0, 1) == 1) {
      pending.push_back({Offset(where_.header_address, 16), h.Uint(8, 4)});
    } else {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: object header version {} is unknown", what_, h.Uint(0, 1)));
    }
    for (size_t b = 0; b < pending.size(); ++b) {
      if (b > kMaxContinuations) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: object header continuations loop", what_));
      }
      const std::vector<uint8_t> block = ReadBytes(pending[b].address, pending[b].length);
      const Bytes f(block, &what_);
      size_t pos = 0;
      size_t end = block.size();
      if (v2 && b > 0) {
        if (!f.Signature(0, "OCHK")) {
          throw Error(ErrorCode::kCorruptData,
                      fmt::format("{}: object header continuation lacks its signature", what_));
        }
        pos = 4;
        end = end >= 4 ? end - 4 : 0;  // the checksum (chunk 0's follows its length)
      }
      const size_t prefix = v2 ? (track_order ? 6 : 4) : 8;
      while (pos + prefix <= end) {
        const uint64_t type = v2 ? f.Uint(pos, 1) : f.Uint(pos, 2);
        const uint64_t size = v2 ? f.Uint(pos + 1, 2) : f.Uint(pos + 2, 2);
        const size_t data = pos + prefix;
        f.Need(data, size);
        if (type == kLayoutMessage) {
          layout.assign(block.begin() + data, block.begin() + data + size);
          return true;
        }
        if (type == kContinuationMessage) {
          const uint64_t addr = f.Uint(data, where_.sizeof_addr);
          const uint64_t len = f.Uint(data + where_.sizeof_addr, where_.sizeof_size);
          if (!continuations.insert(addr).second) {
            throw Error(ErrorCode::kCorruptData,
                        fmt::format("{}: object header continuation at offset {} is reached "
                                    "twice",
                                    what_, addr));
          }
          pending.push_back({addr, len});
        }
        pos = data + size;
      }
    }
    return false;
  }

  void Walk(uint64_t node_address, int expected_level, std::vector<Hdf5RawChunk>& out) {
    // Levels descend by one per call (checked below), so recursion is at most
    // kMaxTreeLevel deep; the visited set makes a shared subtree or a cycle an error instead
    // of a walk that multiplies at every level.
    if (!visited_.insert(node_address).second) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: chunk index node at offset {} is reached twice (a damaged "
                              "B-tree)",
                              what_, where_.base_address + node_address));
    }
    if (visited_.size() > max_nodes_) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the chunk index has more than {} nodes for a grid of {} "
                              "chunks (a damaged B-tree)",
                              what_, max_nodes_, max_chunks_));
    }
    if (CancelRequested()) ThrowIfCancelled(what_ + ": reading the chunk index");  // per node
    const size_t a = where_.sizeof_addr;
    const size_t header = 8 + 2 * a;
    std::vector<uint8_t> head = ReadBytes(node_address, header);
    const Bytes h(head, &what_);
    if (!h.Signature(0, "TREE") || h.Uint(4, 1) != 1) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: chunk index node at offset {} is damaged (no B-tree "
                              "signature)",
                              what_, where_.base_address + node_address));
    }
    const int level = static_cast<int>(h.Uint(5, 1));
    const uint64_t entries = h.Uint(6, 2);
    if (level > kMaxTreeLevel || (expected_level >= 0 && level != expected_level)) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: chunk index node at offset {} has level {}, expected {}", what_,
                              where_.base_address + node_address, level, expected_level));
    }
    const size_t key = 8 + 8 * (static_cast<size_t>(rank_) + 1);
    const std::vector<uint8_t> body =
        ReadBytes(Offset(node_address, header), entries * (key + a) + key);
    const Bytes f(body, &what_);
    for (uint64_t i = 0; i < entries; ++i) {
      const size_t k = i * (key + a);
      const uint64_t child = f.Uint(k + key, a);
      if (level > 0) {
        Walk(child, level - 1, out);
        continue;
      }
      if (out.size() >= max_chunks_) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: the chunk index lists more chunks than the {} positions of "
                                "the chunk grid (a damaged B-tree)",
                                what_, max_chunks_));
      }
      Hdf5RawChunk chunk;
      chunk.size = f.Uint(k, 4);
      chunk.filter_mask = static_cast<uint32_t>(f.Uint(k + 4, 4));
      chunk.coords.resize(rank_);
      for (int d = 0; d < rank_; ++d) chunk.coords[d] = f.Uint(k + 8 + 8 * d, 8);
      chunk.address = Offset(child) + where_.base_address;
      out.push_back(std::move(chunk));
    }
  }

  const File& file_;
  const Hdf5ObjectLocation where_;
  const Hdf5ChunkGrid& grid_;
  const int rank_;
  const uint64_t max_chunks_;
  const uint64_t max_nodes_;
  const std::string& what_;
  std::unordered_set<uint64_t> visited_;  // B-tree nodes, by relative address
};

}  // namespace

std::optional<Hdf5ChunkList> ReadHdf5ChunkIndex(const File& file, const Hdf5ObjectLocation& where,
                                                const Hdf5ChunkGrid& grid,
                                                const std::string& what) {
  try {
    return IndexReader(file, where, grid, what).Read();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the chunk index asks for more memory than there is (a damaged "
                            "index?)",
                            what));
  } catch (const std::length_error&) {
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: the chunk index asks for an impossible size (a damaged index?)", what));
  }
}

}  // namespace gpufeed
