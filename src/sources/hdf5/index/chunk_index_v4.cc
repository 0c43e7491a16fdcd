#include "sources/hdf5/index/chunk_index_v4.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/checked_math.h"
#include "sources/hdf5/format/btree2.h"

namespace gpufeed {
namespace {

// Layout version 4's chunk index types.
enum IndexType : unsigned {
  kSingleChunk = 1,
  kImplicit = 2,
  kFixedArray = 3,
  kExtensibleArray = 4,
  kBTree2 = 5,
};

constexpr size_t kChecksum = 4;
constexpr unsigned kMaxPageBits = 32;

bool Bit(const Bytes& bitmap, size_t pos, uint64_t bit) {
  return (bitmap.Uint(pos + bit / 8, 1) & (0x80u >> (bit % 8))) != 0;
}

// Chunks per axis of the maximum shape (kHdf5Unlimited stays unlimited) and their product
// over the fixed axes.
std::vector<uint64_t> MaxGrid(const Hdf5ChunkGrid& g) {
  std::vector<uint64_t> out;
  for (size_t d = 0; d < g.max_dims.size(); ++d) {
    const uint64_t m = g.max_dims[d];
    out.push_back(m == kHdf5Unlimited ? kHdf5Unlimited
                                      : m / g.chunk_dims[d] + (m % g.chunk_dims[d] != 0));
  }
  return out;
}

uint64_t FixedProduct(Hdf5MetadataReader& r, const std::vector<uint64_t>& grid) {
  uint64_t n = 1;
  for (uint64_t g : grid) {
    if (g == kHdf5Unlimited) r.Damaged("a fixed-size chunk index on an unlimited axis");
    const auto p = CheckedMul(n, g);
    if (!p)
      r.Damaged(
          fmt::format("the maximum chunk grid [{}] overflows 64 bits", fmt::join(grid, ", ")));
    n = *p;
  }
  return n;
}

std::vector<size_t> RowMajor(size_t rank) {
  std::vector<size_t> order(rank);
  for (size_t d = 0; d < rank; ++d) order[d] = d;
  return order;
}

// The element size the index's entries must have: an address, and for filtered chunks a size
// field of 1 to 8 bytes and a 4-byte filter mask.
void CheckElementSize(Hdf5MetadataReader& r, const Hdf5ChunkGrid& g, uint64_t size,
                      const char* structure) {
  const bool ok = g.filtered ? size > r.o() + 4 && size <= r.o() + 12 : size == r.o();
  if (!ok) {
    r.Damaged(fmt::format("{} has {}-byte entries for {} chunks", structure, size,
                          g.filtered ? "filtered" : "unfiltered"));
  }
}

void ReadSingleChunk(Hdf5MetadataReader& r, const Bytes& m, size_t pos, bool filtered_flag,
                     const Hdf5ChunkGrid& g, Hdf5ChunkCollector& out) {
  if (g.grid_total != 1) {
    r.Damaged(fmt::format("a single-chunk index for a grid of {} chunks", g.grid_total));
  }
  if (filtered_flag != g.filtered) r.Damaged("the single chunk's filter flag disagrees");
  uint64_t size = g.chunk_bytes;
  uint32_t mask = 0;
  if (filtered_flag) {
    size = m.Uint(pos, r.l());
    mask = static_cast<uint32_t>(m.Uint(pos + r.l(), 4));
    pos += r.l() + 4;
  }
  const uint64_t address = m.Uint(pos, r.o());
  if (r.Undefined(address)) return;
  out.Add(std::vector<uint64_t>(g.grid.size(), 0), address, size, mask);
}

// Every chunk of the maximum grid stored back to back from `address`, unfiltered.
void ReadImplicit(Hdf5MetadataReader& r, uint64_t address, const Hdf5ChunkGrid& g,
                  Hdf5ChunkCollector& out) {
  if (g.filtered) r.Damaged("an implicit chunk index on a filtered dataset");
  if (r.Undefined(address)) return;
  const std::vector<uint64_t> max_grid = MaxGrid(g);
  const uint64_t total = FixedProduct(r, max_grid);
  const auto bytes = CheckedMul(total, g.chunk_bytes);
  const auto end =
      bytes ? CheckedAdd(r.Absolute(address, "implicit chunk array"), *bytes) : std::nullopt;
  if (!end || *end > r.file().Size()) {
    r.Damaged(
        fmt::format("the implicit chunk array at offset {} ({} chunks of {} bytes) runs "
                    "past the end of the file ({} bytes)",
                    address, total, g.chunk_bytes, r.file().Size()));
  }
  // The positions of the current grid, row-major, each at its offset in the maximum grid.
  const size_t rank = g.grid.size();
  std::vector<uint64_t> scaled(rank, 0);
  for (uint64_t n = 0; n < g.grid_total; ++n) {
    uint64_t index = 0;
    for (size_t d = 0; d < rank; ++d) index = index * max_grid[d] + scaled[d];
    out.Add(scaled, address + index * g.chunk_bytes, g.chunk_bytes, 0);
    for (size_t d = rank; d-- > 0;) {
      if (++scaled[d] < g.grid[d]) break;
      scaled[d] = 0;
    }
  }
}

// A fixed array's data block, its elements either inline or in pages (each with its own
// checksum, present where the block's page bitmap says so).
void ReadFixedArrayBlock(Hdf5MetadataReader& r, uint64_t header, uint64_t address, uint64_t nelmts,
                         uint64_t element_size, unsigned page_bits, Hdf5ChunkCollector& out) {
  const uint64_t page_nelmts = uint64_t{1} << page_bits;
  const bool paged = nelmts > page_nelmts;
  const uint64_t npages = paged ? nelmts / page_nelmts + (nelmts % page_nelmts != 0) : 0;
  const uint64_t bitmap = (npages + 7) / 8;
  const auto inline_bytes = paged ? std::optional<uint64_t>(0) : CheckedMul(nelmts, element_size);
  if (!inline_bytes) r.Damaged("the fixed array's size overflows 64 bits");
  const uint64_t prefix = 6 + r.o() + bitmap;
  const auto n = CheckedAdd(prefix + kChecksum, *inline_bytes);
  if (!n) r.Damaged("the fixed array's size overflows 64 bits");
  r.VisitOnce(address, "fixed array data block");
  const std::vector<uint8_t> block = r.ReadChecked(address, *n, "FADB", "fixed array data block");
  const std::string name = fmt::format("fixed array data block at offset {}", address);
  const Bytes b(block, &name);
  if (b.Uint(6, r.o()) != header) r.Damaged(name + " names another header");
  if (!paged) {
    for (uint64_t i = 0; i < nelmts; ++i)
      out.AddElement(i, b, prefix + i * element_size, element_size);
    return;
  }
  const uint64_t page_bytes = page_nelmts * element_size + kChecksum;  // below the file size
  for (uint64_t p = 0; p < npages; ++p) {
    if (!Bit(b, 6 + r.o(), p)) continue;  // never written: every chunk in it unallocated
    const uint64_t first = p * page_nelmts;
    const uint64_t count = std::min(page_nelmts, nelmts - first);
    const auto at = CheckedMul(p, page_bytes);
    const auto page_addr = at ? CheckedAdd(address + prefix + kChecksum, *at) : std::nullopt;
    if (!page_addr) r.Damaged(name + ": a page offset overflows 64 bits");
    const std::vector<uint8_t> page =
        r.Read(*page_addr, count * element_size + kChecksum, "fixed array page");
    const std::string page_name = fmt::format("fixed array page at offset {}", *page_addr);
    const Bytes pb(page, &page_name);
    if (!pb.ChecksumHolds()) r.Damaged(page_name + " fails its checksum");
    for (uint64_t i = 0; i < count; ++i)
      out.AddElement(first + i, pb, i * element_size, element_size);
  }
}

void ReadFixedArray(Hdf5MetadataReader& r, uint64_t address, const Hdf5ChunkGrid& g,
                    Hdf5ChunkCollector& out) {
  r.VisitOnce(address, "fixed array header");
  const size_t n = 8 + r.l() + r.o() + kChecksum;
  const std::vector<uint8_t> block = r.ReadChecked(address, n, "FAHD", "fixed array header");
  const std::string name = fmt::format("fixed array header at offset {}", address);
  const Bytes h(block, &name);
  const uint64_t client = h.Uint(5, 1);
  const uint64_t element_size = h.Uint(6, 1);
  const uint64_t page_bits = h.Uint(7, 1);
  const uint64_t nelmts = h.Uint(8, r.l());
  const uint64_t data = h.Uint(8 + r.l(), r.o());
  if (client != (g.filtered ? 1u : 0u)) r.Damaged(fmt::format("{}: client {}", name, client));
  CheckElementSize(r, g, element_size, "the fixed array");
  if (page_bits == 0 || page_bits > kMaxPageBits) {
    r.Damaged(fmt::format("{}: {} page bits", name, page_bits));
  }
  const uint64_t expected = FixedProduct(r, MaxGrid(g));
  if (nelmts != expected) {
    r.Damaged(fmt::format("{} holds {} entries for a chunk grid of {}", name, nelmts, expected));
  }
  if (r.Undefined(data)) return;
  ReadFixedArrayBlock(r, address, data, nelmts, element_size, static_cast<unsigned>(page_bits),
                      out);
}

void ReadBTree2(Hdf5MetadataReader& r, uint64_t address, const Hdf5ChunkGrid& g,
                Hdf5ChunkCollector& out) {
  const unsigned type = g.filtered ? 11 : 10;
  const Hdf5BTree2Header h = ReadHdf5BTree2Header(r, address, type);
  const size_t rank = g.grid.size();
  const uint64_t fixed = r.o() + 8 * rank + (g.filtered ? 4 : 0);
  const bool fits =
      g.filtered ? h.record_size > fixed && h.record_size <= fixed + 8 : h.record_size == fixed;
  if (!fits) {
    r.Damaged(fmt::format("the chunk B-tree's records of {} bytes do not fit a rank-{} dataset",
                          h.record_size, rank));
  }
  const size_t size_len = g.filtered ? h.record_size - fixed : 0;
  std::vector<uint64_t> scaled(rank);
  WalkHdf5BTree2(r, h, g.grid_total, [&](const Bytes& rec) {
    const uint64_t addr = rec.Uint(0, r.o());
    uint64_t size = g.chunk_bytes;
    uint32_t mask = 0;
    size_t pos = r.o();
    if (g.filtered) {
      size = rec.Uint(pos, size_len);
      mask = static_cast<uint32_t>(rec.Uint(pos + size_len, 4));
      pos += size_len + 4;
    }
    for (size_t d = 0; d < rank; ++d) scaled[d] = rec.Uint(pos + 8 * d, 8);
    if (r.Undefined(addr)) r.Damaged("the chunk B-tree holds a chunk without an address");
    out.Add(scaled, addr, size, mask);
  });
}

}  // namespace

Hdf5ChunkCollector::Hdf5ChunkCollector(Hdf5MetadataReader& r, const Hdf5ChunkGrid& grid,
                                       std::vector<size_t> order)
    : r_(r), grid_(grid), order_(std::move(order)), scaled_(grid.grid.size()) {}

void Hdf5ChunkCollector::AddElement(uint64_t index, const Bytes& elements, size_t pos,
                                    size_t element_size) {
  const uint64_t address = elements.Uint(pos, r_.o());
  if (r_.Undefined(address)) return;
  uint64_t size = grid_.chunk_bytes;
  uint32_t mask = 0;
  if (grid_.filtered) {
    size = elements.Uint(pos + r_.o(), element_size - r_.o() - 4);
    mask = static_cast<uint32_t>(elements.Uint(pos + element_size - 4, 4));
  }
  // The index over the maximum grid, in `order_` (slowest axis first): the first axis takes
  // what remains (it may be the unlimited one).
  uint64_t rest = index;
  for (size_t i = order_.size(); i-- > 1;) {
    const size_t d = order_[i];
    const uint64_t m =
        grid_.max_dims[d] / grid_.chunk_dims[d] + (grid_.max_dims[d] % grid_.chunk_dims[d] != 0);
    if (m == 0) r_.Damaged("the chunk index holds a chunk on an axis of maximum extent 0");
    scaled_[d] = rest % m;
    rest /= m;
  }
  scaled_[order_[0]] = rest;
  Add(scaled_, address, size, mask);
}

void Hdf5ChunkCollector::Add(const std::vector<uint64_t>& scaled, uint64_t address, uint64_t size,
                             uint32_t mask) {
  for (size_t d = 0; d < scaled.size(); ++d) {
    if (scaled[d] >= grid_.grid[d]) {
      r_.Damaged(
          fmt::format("the chunk index holds a chunk at [{}] (in chunks) outside the "
                      "dataset's grid [{}]",
                      fmt::join(scaled, ","), fmt::join(grid_.grid, ",")));
    }
  }
  if (chunks.size() >= grid_.grid_total) {
    r_.Damaged(
        fmt::format("the chunk index lists more chunks than the {} positions of the chunk "
                    "grid",
                    grid_.grid_total));
  }
  Hdf5RawChunk c;
  c.coords.resize(scaled.size());
  // scaled < grid and grid * chunk < shape + chunk: no overflow.
  for (size_t d = 0; d < scaled.size(); ++d) c.coords[d] = scaled[d] * grid_.chunk_dims[d];
  c.address = r_.Absolute(address, "a chunk");
  c.size = size;
  c.filter_mask = mask;
  chunks.push_back(std::move(c));
}

Hdf5ChunkList ReadV4ChunkIndex(Hdf5MetadataReader& r, const Bytes& m, const Hdf5ChunkGrid& g) {
  const uint64_t flags = m.Uint(2, 1);
  const uint64_t ndims = m.Uint(3, 1);
  const uint64_t width = m.Uint(4, 1);
  const size_t rank = g.grid.size();
  if (ndims != rank + 1 || width < 1 || width > 8) {
    r.Damaged(fmt::format("the chunked layout has {} dimensions of {} bytes for a rank-{} dataset",
                          ndims, width, rank));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (m.Uint(5 + d * width, width) != g.chunk_dims[d]) {
      r.Damaged("the layout message's chunk shape disagrees with the dataset's");
    }
  }
  size_t pos = 5 + ndims * width;
  const unsigned type = static_cast<unsigned>(m.Uint(pos++, 1));
  Hdf5ChunkList list;
  list.partial_edges_unfiltered = (flags & 0x01) != 0;
  // A dataset never written has no index yet (its address undefined): every chunk reads as
  // the fill value.
  // (The single-chunk and implicit readers check their own address.)
  const size_t address_at = type == kExtensibleArray ? pos + 5
                            : type == kFixedArray    ? pos + 1
                                                     : pos + 6;
  if ((type == kExtensibleArray || type == kFixedArray || type == kBTree2) &&
      r.Undefined(m.Uint(address_at, r.o()))) {
    list.method = "no chunk written yet";
    return list;
  }
  if (type == kExtensibleArray) {
    size_t unlimited = rank;
    for (size_t d = 0; d < rank; ++d) {
      if (g.max_dims[d] != kHdf5Unlimited) continue;
      if (unlimited != rank) r.Damaged("an extensible array index with two unlimited axes");
      unlimited = d;
    }
    if (unlimited == rank) r.Damaged("an extensible array index without an unlimited axis");
    std::vector<size_t> order{unlimited};
    for (size_t d = 0; d < rank; ++d) {
      if (d != unlimited) order.push_back(d);
    }
    Hdf5ChunkCollector out(r, g, std::move(order));
    ReadHdf5ExtensibleArray(r, m.Uint(pos + 5, r.o()), g, out);
    list.chunks = std::move(out.chunks);
    list.method = "extensible array, read directly";
    list.library_chunk_info_reliable = unlimited == 0;
    return list;
  }
  Hdf5ChunkCollector out(r, g, RowMajor(rank));
  if (type == kSingleChunk) {
    ReadSingleChunk(r, m, pos, (flags & 0x02) != 0, g, out);
    list.method = "single chunk, read directly";
  } else if (type == kImplicit) {
    ReadImplicit(r, m.Uint(pos, r.o()), g, out);
    list.method = "implicit, read directly";
  } else if (type == kFixedArray) {
    ReadFixedArray(r, m.Uint(pos + 1, r.o()), g, out);
    list.method = "fixed array, read directly";
  } else if (type == kBTree2) {
    ReadBTree2(r, m.Uint(pos + 6, r.o()), g, out);
    list.method = "v2 B-tree, read directly";
  } else {
    r.Damaged(fmt::format("chunk index type {}", type));
  }
  list.chunks = std::move(out.chunks);
  return list;
}

}  // namespace gpufeed
