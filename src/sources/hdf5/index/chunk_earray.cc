// The extensible array chunk index (one unlimited axis, libver="latest"): a header, an index
// block holding the first elements and the addresses of the first data blocks and of the
// super blocks, super blocks holding data block addresses (and page bitmaps), data blocks
// holding elements (inline, or in checksummed pages). Element i is the chunk at linear position
// i of the grid with the unlimited axis first.
#include <fmt/format.h>

#include <bit>

#include "core/checked_math.h"
#include "sources/hdf5/index/chunk_index_v4.h"

namespace gpufeed {
namespace {

constexpr size_t kChecksum = 4;
constexpr unsigned kMaxPageBits = 32;

struct EaParams {
  uint64_t header = 0;
  uint64_t element_size = 0;
  unsigned max_nelmts_bits = 0;
  uint64_t index_elements = 0;
  uint64_t min_data_elements = 0;
  uint64_t min_data_pointers = 0;
  uint64_t page_elements = 0;
  unsigned super_blocks = 0;        // all of them
  unsigned index_super_blocks = 0;  // those whose data blocks the index block points at
  uint64_t limit = 0;               // elements past this one lie outside the dataset's extent
  size_t offset_size = 0;           // bytes of a block's offset field
};

bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

class EaReader {
 public:
  EaReader(Hdf5MetadataReader& r, const EaParams& p, Hdf5ChunkCollector& out)
      : r_(r), p_(p), out_(out) {}

  void IndexBlock(uint64_t address) {
    const uint64_t direct = 2 * (p_.min_data_pointers - 1);
    const uint64_t supers = p_.super_blocks - p_.index_super_blocks;
    const uint64_t n = 6 + r_.o() + p_.index_elements * p_.element_size +
                       (direct + supers) * r_.o() + kChecksum;  // small: every factor < 2^8
    r_.VisitOnce(address, "extensible array index block");
    const std::vector<uint8_t> block =
        r_.ReadChecked(address, n, "EAIB", "extensible array index block");
    const std::string name = fmt::format("extensible array index block at offset {}", address);
    const Bytes b(block, &name);
    if (b.Uint(6, r_.o()) != p_.header) r_.Damaged(name + " names another header");
    size_t pos = 6 + r_.o();
    for (uint64_t i = 0; i < p_.index_elements && i < p_.limit; ++i) {
      out_.AddElement(i, b, pos + i * p_.element_size, p_.element_size);
    }
    pos += p_.index_elements * p_.element_size;
    uint64_t dblk = 0;  // data block number among those the index block points at
    for (unsigned u = 0; u < p_.index_super_blocks; ++u) {
      for (uint64_t j = 0; j < BlocksOf(u); ++j, ++dblk) {
        const uint64_t first = FirstElement(u, j);
        if (first >= p_.limit) return;
        const uint64_t addr = b.Uint(pos + dblk * r_.o(), r_.o());
        if (!r_.Undefined(addr)) DataBlock(addr, first, ElementsOf(u), nullptr, 0);
      }
    }
    pos += direct * r_.o();
    for (unsigned u = p_.index_super_blocks; u < p_.super_blocks; ++u) {
      if (FirstElement(u, 0) >= p_.limit) return;
      const uint64_t addr = b.Uint(pos + (u - p_.index_super_blocks) * r_.o(), r_.o());
      if (!r_.Undefined(addr)) SuperBlock(addr, u);
    }
  }

 private:
  uint64_t BlocksOf(unsigned u) const { return uint64_t{1} << (u / 2); }
  uint64_t ElementsOf(unsigned u) const {
    return (uint64_t{1} << ((u + 1) / 2)) * p_.min_data_elements;
  }
  // The global index of element 0 of data block `j` of super block `u`, saturating at 2^64-1
  // (past any limit).
  uint64_t FirstElement(unsigned u, uint64_t j) const {
    uint64_t start = p_.index_elements;
    for (unsigned v = 0; v < u; ++v) {
      const auto s = CheckedMul(BlocksOf(v), ElementsOf(v));
      const auto t = s ? CheckedAdd(start, *s) : std::nullopt;
      if (!t) return ~uint64_t{0};
      start = *t;
    }
    const auto off = CheckedMul(j, ElementsOf(u));
    const auto first = off ? CheckedAdd(start, *off) : std::nullopt;
    return first ? *first : ~uint64_t{0};
  }

  void SuperBlock(uint64_t address, unsigned u) {
    const uint64_t ndblks = BlocksOf(u);
    const uint64_t nelmts = ElementsOf(u);
    const bool paged = nelmts > p_.page_elements;
    const uint64_t bitmap = paged ? (nelmts / p_.page_elements + 7) / 8 : 0;
    const auto body = CheckedMul(ndblks, bitmap + r_.o());
    if (!body) r_.Damaged("an extensible array super block's size overflows 64 bits");
    const uint64_t prefix = 6 + r_.o() + p_.offset_size;
    r_.VisitOnce(address, "extensible array super block");
    const std::vector<uint8_t> block =
        r_.ReadChecked(address, prefix + *body + kChecksum, "EASB", "extensible array super block");
    const std::string name = fmt::format("extensible array super block at offset {}", address);
    const Bytes b(block, &name);
    if (b.Uint(6, r_.o()) != p_.header) r_.Damaged(name + " names another header");
    const size_t addrs = prefix + ndblks * bitmap;
    for (uint64_t j = 0; j < ndblks; ++j) {
      const uint64_t first = FirstElement(u, j);
      if (first >= p_.limit) return;
      const uint64_t addr = b.Uint(addrs + j * r_.o(), r_.o());
      if (r_.Undefined(addr)) continue;
      // Page bits of block j: bit j * pages + page of the bitmap.
      DataBlock(addr, first, nelmts, paged ? &b : nullptr, j * (nelmts / p_.page_elements));
    }
  }

  // A data block of `nelmts` elements whose first has global index `first`; `bitmap` (the
  // super block's, bits from `first_bit`) when the block is paged.
  void DataBlock(uint64_t address, uint64_t first, uint64_t nelmts, const Bytes* bitmap,
                 uint64_t first_bit) {
    const bool paged = nelmts > p_.page_elements;
    if (paged && bitmap == nullptr) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: a paged extensible array data block under the index block "
                              "(libhdf5 does not write these)",
                              r_.what()));
    }
    const uint64_t prefix = 6 + r_.o() + p_.offset_size;
    const auto inline_bytes =
        paged ? std::optional<uint64_t>(0) : CheckedMul(nelmts, p_.element_size);
    if (!inline_bytes) r_.Damaged("an extensible array data block's size overflows 64 bits");
    r_.VisitOnce(address, "extensible array data block");
    const std::vector<uint8_t> block = r_.ReadChecked(address, prefix + *inline_bytes + kChecksum,
                                                      "EADB", "extensible array data block");
    const std::string name = fmt::format("extensible array data block at offset {}", address);
    const Bytes b(block, &name);
    if (b.Uint(6, r_.o()) != p_.header) r_.Damaged(name + " names another header");
    if (!paged) {
      for (uint64_t k = 0; k < nelmts && first + k < p_.limit; ++k) {
        out_.AddElement(first + k, b, prefix + k * p_.element_size, p_.element_size);
      }
      return;
    }
    const uint64_t page_bytes = p_.page_elements * p_.element_size + kChecksum;
    const uint64_t bits_at = 6 + r_.o() + p_.offset_size;  // the super block's bitmap
    for (uint64_t page = 0; page < nelmts / p_.page_elements; ++page) {
      const uint64_t page_first = first + page * p_.page_elements;
      if (page_first >= p_.limit) return;
      const uint64_t bit = first_bit + page;
      if ((bitmap->Uint(bits_at + bit / 8, 1) & (0x80u >> (bit % 8))) == 0) continue;
      const auto at = CheckedMul(page, page_bytes);
      const auto page_addr = at ? CheckedAdd(address + prefix + kChecksum, *at) : std::nullopt;
      if (!page_addr) r_.Damaged(name + ": a page offset overflows 64 bits");
      const std::vector<uint8_t> bytes = r_.Read(*page_addr, page_bytes, "extensible array page");
      const std::string page_name = fmt::format("extensible array page at offset {}", *page_addr);
      const Bytes pb(bytes, &page_name);
      if (!pb.ChecksumHolds()) r_.Damaged(page_name + " fails its checksum");
      for (uint64_t k = 0; k < p_.page_elements && page_first + k < p_.limit; ++k) {
        out_.AddElement(page_first + k, pb, k * p_.element_size, p_.element_size);
      }
    }
  }

  Hdf5MetadataReader& r_;
  const EaParams& p_;
  Hdf5ChunkCollector& out_;
};

// Elements of the positions of the current extent: the unlimited axis' chunks times the
// maximum grid of the others (saturating: the array's own count bounds it then).
uint64_t ExtentLimit(const Hdf5ChunkGrid& g) {
  uint64_t n = 1;
  for (size_t d = 0; d < g.grid.size(); ++d) {
    const uint64_t m = g.max_dims[d] == kHdf5Unlimited ? g.grid[d]
                                                       : g.max_dims[d] / g.chunk_dims[d] +
                                                             (g.max_dims[d] % g.chunk_dims[d] != 0);
    const auto p = CheckedMul(n, m);
    if (!p) return ~uint64_t{0};
    n = *p;
  }
  return n;
}

}  // namespace

void ReadHdf5ExtensibleArray(Hdf5MetadataReader& r, uint64_t address, const Hdf5ChunkGrid& g,
                             Hdf5ChunkCollector& out) {
  r.VisitOnce(address, "extensible array header");
  const size_t n = 12 + 6 * r.l() + r.o() + kChecksum;
  const std::vector<uint8_t> block = r.ReadChecked(address, n, "EAHD", "extensible array header");
  const std::string name = fmt::format("extensible array header at offset {}", address);
  const Bytes h(block, &name);
  EaParams p;
  p.header = address;
  const uint64_t client = h.Uint(5, 1);
  p.element_size = h.Uint(6, 1);
  p.max_nelmts_bits = static_cast<unsigned>(h.Uint(7, 1));
  p.index_elements = h.Uint(8, 1);
  p.min_data_elements = h.Uint(9, 1);
  p.min_data_pointers = h.Uint(10, 1);
  const uint64_t page_bits = h.Uint(11, 1);
  const uint64_t max_index_set = h.Uint(12 + 4 * r.l(), r.l());
  const uint64_t index_block = h.Uint(12 + 6 * r.l(), r.o());
  if (client != (g.filtered ? 1u : 0u)) r.Damaged(fmt::format("{}: client {}", name, client));
  const bool filtered_size_ok = p.element_size > r.o() + 4 && p.element_size <= r.o() + 12;
  if (g.filtered ? !filtered_size_ok : p.element_size != r.o()) {
    r.Damaged(fmt::format("{} has {}-byte entries", name, p.element_size));
  }
  if (p.max_nelmts_bits == 0 || p.max_nelmts_bits > 64 || p.index_elements == 0 ||
      !PowerOfTwo(p.min_data_elements) || !PowerOfTwo(p.min_data_pointers) ||
      p.min_data_pointers < 2 || page_bits > kMaxPageBits ||
      static_cast<unsigned>(std::countr_zero(p.min_data_elements)) > p.max_nelmts_bits) {
    r.Damaged(fmt::format("{}: impossible creation parameters", name));
  }
  p.page_elements = uint64_t{1} << page_bits;
  p.super_blocks = 1 + p.max_nelmts_bits - std::countr_zero(p.min_data_elements);
  p.index_super_blocks = 2 * std::countr_zero(p.min_data_pointers);
  if (p.index_super_blocks > p.super_blocks) {
    r.Damaged(fmt::format("{}: more super blocks in the index block than in the array", name));
  }
  p.offset_size = (p.max_nelmts_bits + 7) / 8;
  p.limit = std::min(max_index_set, ExtentLimit(g));
  if (r.Undefined(index_block)) return;
  EaReader(r, p, out).IndexBlock(index_block);
}

}  // namespace gpufeed
