#include "sources/hdf5/format/dense_links.h"

#include <fmt/format.h>

#include <bit>
#include <unordered_map>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/btree2.h"

namespace gpufeed {
namespace {

constexpr unsigned kNameIndexType = 5;
constexpr unsigned kOrderIndexType = 6;
constexpr size_t kChecksum = 4;
constexpr unsigned kMaxRows = 64;
constexpr uint64_t kMaxDirectBlock = uint64_t{1} << 28;

// The fractal heap's header fields gpufeed needs, and its doubling table's shape.
struct Heap {
  uint64_t address = 0;
  size_t id_length = 0;
  bool checksummed_blocks = false;
  uint64_t objects = 0;  // managed + huge + tiny
  uint64_t width = 0, start_block = 0, max_direct = 0;
  unsigned max_heap_bits = 0, current_rows = 0, max_direct_rows = 0, first_row_bits = 0;
  uint64_t root = 0;
  size_t offset_size = 0, length_size = 0;  // of a managed object's heap ID fields

  uint64_t RowBlockSize(unsigned row) const {
    return row == 0 ? start_block : start_block << (row - 1);
  }
  uint64_t RowOffset(unsigned row) const {
    return row == 0 ? 0 : (start_block * width) << (row - 1);
  }
};

bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
unsigned Log2(uint64_t v) { return v == 0 ? 0 : 63 - std::countl_zero(v); }

Heap ReadHeapHeader(Hdf5MetadataReader& r, uint64_t address) {
  const size_t o = r.o(), l = r.l();
  r.VisitOnce(address, "fractal heap header");
  const std::vector<uint8_t> block =
      r.ReadChecked(address, 26 + 12 * l + 3 * o, "FRHP", "fractal heap header");
  const std::string name = fmt::format("fractal heap header at offset {}", address);
  const Bytes b(block, &name);
  Heap h;
  h.address = address;
  h.id_length = b.Uint(5, 2);
  if (b.Uint(7, 2) != 0) {
    throw Error(
        ErrorCode::kUnsupported,
        fmt::format("{}: {} is filtered (libhdf5 does not filter link heaps)", r.what(), name));
  }
  h.checksummed_blocks = (b.Uint(9, 1) & 0x02) != 0;
  const uint64_t max_managed = b.Uint(10, 4);
  size_t pos = 14 + 5 * l + 2 * o;  // to the number of managed objects
  const uint64_t managed = b.Uint(pos, l), huge = b.Uint(pos + 2 * l, l);
  const uint64_t tiny = b.Uint(pos + 4 * l, l);
  pos += 5 * l;
  h.width = b.Uint(pos, 2);
  h.start_block = b.Uint(pos + 2, l);
  h.max_direct = b.Uint(pos + 2 + l, l);
  h.max_heap_bits = static_cast<unsigned>(b.Uint(pos + 2 + 2 * l, 2));
  h.root = b.Uint(pos + 6 + 2 * l, o);
  h.current_rows = static_cast<unsigned>(b.Uint(pos + 6 + 2 * l + o, 2));
  const auto objects = CheckedAdd(managed, huge);
  const auto all = objects ? CheckedAdd(*objects, tiny) : std::nullopt;
  if (!all || !PowerOfTwo(h.width) || !PowerOfTwo(h.start_block) || !PowerOfTwo(h.max_direct) ||
      h.max_direct < h.start_block || h.max_direct > kMaxDirectBlock || h.max_heap_bits == 0 ||
      h.max_heap_bits > 64 || h.current_rows > kMaxRows || h.id_length < 2 || h.id_length > 64 ||
      Log2(h.start_block) + Log2(h.width) + h.current_rows > 64) {
    r.Damaged(fmt::format("{}: an impossible doubling table", name));
  }
  h.objects = *all;
  h.max_direct_rows = Log2(h.max_direct) - Log2(h.start_block) + 2;
  h.first_row_bits = Log2(h.start_block) + Log2(h.width);
  h.offset_size = (h.max_heap_bits + 7) / 8;
  const size_t max_managed_size = Log2(max_managed) / 8 + 1;
  h.length_size = std::min<size_t>((Log2(h.max_direct) + 7) / 8, max_managed_size);
  if (1 + h.offset_size + h.length_size > h.id_length) {
    r.Damaged(fmt::format("{}: heap IDs of {} bytes cannot hold an offset and a length", name,
                          h.id_length));
  }
  return h;
}

// Resolves heap IDs to the bytes of their objects, reading each heap block once.
class HeapObjects {
 public:
  HeapObjects(Hdf5MetadataReader& r, const Heap& h) : r_(r), h_(h) {}

  // The object a heap ID names; the view lives as long as this.
  Bytes Object(const Bytes& id, std::string* name) {
    const uint64_t first = id.Uint(0, 1);
    const uint64_t type = (first >> 4) & 0x03;
    if ((first >> 6) != 0) r_.Damaged(fmt::format("a heap ID of version {}", first >> 6));
    if (type == 2) return Tiny(id, first);
    if (type != 0) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: a link kept as a huge fractal heap object (libhdf5 does not "
                              "write these for links)",
                              r_.what()));
    }
    const uint64_t offset = id.Uint(1, h_.offset_size);
    const uint64_t length = id.Uint(1 + h_.offset_size, h_.length_size);
    uint64_t block_offset = 0;
    const std::vector<uint8_t>& block = Locate(offset, block_offset);
    const uint64_t within = offset - block_offset;
    const uint64_t prefix = 5 + r_.o() + h_.offset_size + (h_.checksummed_blocks ? 4 : 0);
    if (within < prefix || within > block.size() || length == 0 || length > block.size() - within) {
      r_.Damaged(
          fmt::format("a heap ID names {} bytes at heap offset {}, outside its direct "
                      "block ({} bytes at heap offset {})",
                      length, offset, block.size(), block_offset));
    }
    *name =
        fmt::format("link at heap offset {} of the fractal heap at offset {}", offset, h_.address);
    return Bytes(std::span<const uint8_t>(block).subspan(within, length), name);
  }

 private:
  Bytes Tiny(const Bytes& id, uint64_t first) {
    const bool extended = h_.id_length > 18;
    const size_t at = extended ? 2 : 1;
    const uint64_t length = (extended ? ((first & 0x0f) << 8 | id.Uint(1, 1)) : (first & 0x0f)) + 1;
    if (length > id.size() - at) r_.Damaged("a tiny heap object longer than its heap ID");
    return id.Sub(at, length);
  }

  // The direct block holding heap offset `offset`, and that block's own heap offset.
  const std::vector<uint8_t>& Locate(uint64_t offset, uint64_t& block_offset) {
    if (h_.current_rows == 0) {
      block_offset = 0;
      return Direct(h_.root, 0, h_.start_block);
    }
    uint64_t iblock = h_.root, iblock_offset = 0;
    unsigned rows = h_.current_rows;
    for (int depth = 0; depth <= static_cast<int>(kMaxRows); ++depth) {
      const std::vector<uint8_t>& ib = Indirect(iblock, iblock_offset, rows);
      const uint64_t rel = offset - iblock_offset;  // offset >= iblock_offset (by descent)
      unsigned row = 0;
      uint64_t col = 0;
      if (rel < h_.start_block * h_.width) {
        col = rel / h_.start_block;
      } else {
        const unsigned high = Log2(rel);
        row = high - h_.first_row_bits + 1;
        col = (rel - (uint64_t{1} << high)) / h_.RowBlockSize(row);
      }
      if (row >= rows) r_.Damaged(fmt::format("heap offset {} lies past the heap's rows", offset));
      const uint64_t entry = row * h_.width + col;
      const uint64_t child =
          Bytes(ib, &r_.what()).Uint(5 + r_.o() + h_.offset_size + entry * r_.o(), r_.o());
      const uint64_t child_offset = iblock_offset + h_.RowOffset(row) + col * h_.RowBlockSize(row);
      if (r_.Undefined(child)) {
        r_.Damaged(fmt::format("heap offset {} lies in a block never allocated", offset));
      }
      if (row < h_.max_direct_rows) {
        block_offset = child_offset;
        return Direct(child, child_offset, h_.RowBlockSize(row));
      }
      rows = Log2(h_.RowBlockSize(row)) - h_.first_row_bits + 1;
      iblock = child;
      iblock_offset = child_offset;
    }
    r_.Damaged("the fractal heap's indirect blocks nest too deep");
  }

  const std::vector<uint8_t>& Indirect(uint64_t address, uint64_t heap_offset, unsigned rows) {
    if (auto it = blocks_.find(address); it != blocks_.end()) return it->second;
    r_.VisitOnce(address, "fractal heap indirect block");
    const uint64_t direct = std::min(rows, h_.max_direct_rows) * h_.width;
    const uint64_t indirect =
        rows > h_.max_direct_rows ? (rows - h_.max_direct_rows) * h_.width : 0;
    const auto n = CheckedMul(direct + indirect, r_.o());
    if (!n || rows > kMaxRows) r_.Damaged("a fractal heap indirect block of impossible size");
    std::vector<uint8_t> block =
        r_.ReadChecked(address, 5 + r_.o() + h_.offset_size + *n + kChecksum, "FHIB",
                       "fractal heap indirect block");
    CheckBlockHeader(block, address, heap_offset, "indirect");
    return blocks_.emplace(address, std::move(block)).first->second;
  }

  const std::vector<uint8_t>& Direct(uint64_t address, uint64_t heap_offset, uint64_t size) {
    if (auto it = blocks_.find(address); it != blocks_.end()) return it->second;
    r_.VisitOnce(address, "fractal heap direct block");
    std::vector<uint8_t> block = r_.Read(address, size, "fractal heap direct block");
    const std::string name = fmt::format("fractal heap direct block at offset {}", address);
    const Bytes b(block, &name);
    if (!b.Signature(0, "FHDB") || b.Uint(4, 1) != 0) r_.Damaged(name + " lacks its signature");
    CheckBlockHeader(block, address, heap_offset, "direct");
    if (h_.checksummed_blocks) {
      const size_t at = 5 + r_.o() + h_.offset_size;
      const uint64_t stored = b.Uint(at, 4);
      std::vector<uint8_t> zeroed = block;
      std::fill(zeroed.begin() + at, zeroed.begin() + at + 4, 0);
      if (Hdf5MetadataChecksum(zeroed) != stored) r_.Damaged(name + " fails its checksum");
    }
    return blocks_.emplace(address, std::move(block)).first->second;
  }

  void CheckBlockHeader(const std::vector<uint8_t>& block, uint64_t address, uint64_t heap_offset,
                        const char* kind) {
    const std::string name = fmt::format("fractal heap {} block at offset {}", kind, address);
    const Bytes b(block, &name);
    if (b.Uint(5, r_.o()) != h_.address) r_.Damaged(name + " names another heap");
    if (b.Uint(5 + r_.o(), h_.offset_size) != heap_offset) {
      r_.Damaged(fmt::format("{} says it holds heap offset {}, its parent says {}", name,
                             b.Uint(5 + r_.o(), h_.offset_size), heap_offset));
    }
  }

  Hdf5MetadataReader& r_;
  const Heap& h_;
  std::unordered_map<uint64_t, std::vector<uint8_t>> blocks_;
};

}  // namespace

void ReadHdf5DenseLinks(Hdf5MetadataReader& r, const Hdf5DenseLinks& where,
                        const std::function<std::string(const Bytes&)>& link) {
  const Heap heap = ReadHeapHeader(r, where.heap);
  HeapObjects objects(r, heap);
  const Hdf5BTree2Header names = ReadHdf5BTree2Header(r, where.name_index, kNameIndexType);
  if (names.record_size != 4 + heap.id_length) {
    r.Damaged(fmt::format("the link name index has {}-byte records for {}-byte heap IDs",
                          names.record_size, heap.id_length));
  }
  WalkHdf5BTree2(r, names, heap.objects, [&](const Bytes& record) {
    std::string object_name;
    const Bytes message = objects.Object(record.Sub(4, heap.id_length), &object_name);
    const std::string link_name = link(message);
    const uint32_t hash = Hdf5MetadataChecksum(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(link_name.data()), link_name.size()));
    if (hash != record.Uint(0, 4)) {
      r.Damaged(fmt::format("the link name index's hash of '{}' is wrong", link_name));
    }
  });
  if (r.Undefined(where.order_index)) return;
  const Hdf5BTree2Header order = ReadHdf5BTree2Header(r, where.order_index, kOrderIndexType);
  if (order.record_size != 8 + heap.id_length) {
    r.Damaged(fmt::format("the link creation-order index has {}-byte records", order.record_size));
  }
  WalkHdf5BTree2(r, order, heap.objects, [&](const Bytes& record) {
    std::string object_name;
    objects.Object(record.Sub(8, heap.id_length), &object_name);  // resolves inside its block
  });
}

}  // namespace gpufeed
