#include "sources/hdf5/format/message_checks.h"

#include <fmt/format.h>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The remedy for a message of a newer format: h5py writes HDF5 1.10's format when told to.
constexpr const char* kRewriteOlderFormat =
    "write the file with h5py's default libver, or copy its datasets into a file opened "
    "with h5py.File(new_path, 'w', libver=('earliest', 'v110'))";

constexpr int kMaxTypeDepth = 16;  // nested compound / array / vlen / enum base types
constexpr unsigned kMaxRank = 32;
constexpr unsigned kMaxLayoutDims = 33;  // rank + 1 (the element size)
constexpr unsigned kMaxFilters = 32;

// Compound member list: names, offsets and member types.
size_t CompoundMembers(const Hdf5MessageContext& c, const Bytes& m, size_t pos, unsigned version,
                       uint64_t bits, uint64_t size, int depth) {
  const uint64_t members = bits & 0xffff;
  if (version < 3 && members == 0) c.Damaged("compound datatype without members");
  for (uint64_t i = 0; i < members; ++i) {
    const size_t name = m.StringAt(pos);
    pos += version < 3 ? ((name + 1 + 7) / 8) * 8 : name + 1;
    if (version < 3) {
      pos += 4;                     // byte offset
      if (version == 1) pos += 28;  // dimensionality, reserved, permutation, dims
    } else {
      size_t width = 1;
      while (width < 4 && (size >> (8 * width)) != 0) ++width;
      pos += width;
    }
    m.Need(pos, 0);
    pos += CheckDatatypeMessage(c, m, pos, depth + 1);
  }
  return pos;
}

// Enumeration: base type, names, values. libhdf5 sizes the values by the base type (it
// allocates members x base size before it reads them), so the base type's size must be the
// enumeration's own: a crafted base of 1.5 GB under a 1-byte enumeration made it allocate
// 3 GB (found by hdf5_fuzz).
size_t EnumMembers(const Hdf5MessageContext& c, const Bytes& m, size_t pos, unsigned version,
                   uint64_t bits, uint64_t size, int depth) {
  const uint64_t base_size = m.Uint(pos + 4, 4);
  if (base_size != size) {
    c.Damaged(fmt::format("enumeration datatype of {} bytes over a base type of {} bytes", size,
                          base_size));
  }
  pos += CheckDatatypeMessage(c, m, pos, depth + 1);
  const uint64_t members = bits & 0xffff;
  for (uint64_t i = 0; i < members; ++i) {
    const size_t name = m.StringAt(pos);
    pos += version < 3 ? ((name + 1 + 7) / 8) * 8 : name + 1;
  }
  const auto values = CheckedMul(members, size);  // one value of the type's size each
  if (!values) c.Damaged("enumeration values overflow");
  m.Need(pos, *values);
  return pos + *values;
}

// Version 4's chunked layout: flags, dims of a given width, the index type and its fields.
void CheckChunkedLayoutV4(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t flags = m.Uint(2, 1);
  const uint64_t dims = m.Uint(3, 1);
  const uint64_t width = m.Uint(4, 1);
  if (dims < 2 || dims > kMaxLayoutDims || width < 1 || width > 8) {
    c.Damaged(fmt::format("chunked layout of {} dims of {} bytes", dims, width));
  }
  size_t pos = 5 + dims * width;
  const uint64_t index = m.Uint(pos, 1);
  pos += 1;
  switch (index) {
    case 1:  // single chunk
      if (flags & 0x02) pos += c.sizeof_size + 4;
      break;
    case 2:  // implicit
      break;
    case 3:  // fixed array
      pos += 1;
      break;
    case 4:  // extensible array
      pos += 5;
      break;
    case 5:  // v2 B-tree
      pos += 6;
      break;
    default:
      c.Damaged(fmt::format("chunk index type {}", index));
  }
  m.Need(pos, c.sizeof_addr);
}

}  // namespace

void Hdf5MessageContext::Damaged(const std::string& what) const {
  throw Error(ErrorCode::kCorruptData, fmt::format("{}: damaged HDF5 metadata: {}", path, what));
}

void Hdf5MessageContext::Unsupported(const std::string& what) const {
  throw Error(ErrorCode::kUnsupported, fmt::format("{}: {}", path, what));
}

std::optional<uint64_t> CheckDataspaceMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  const uint64_t rank = m.Uint(1, 1);
  const uint64_t flags = m.Uint(2, 1);
  if (version != 1 && version != 2) c.Damaged(fmt::format("dataspace version {}", version));
  if (rank > kMaxRank) c.Damaged(fmt::format("dataspace of rank {}", rank));
  const size_t start = version == 1 ? 8 : 4;
  size_t arrays = 1 + ((flags & 0x01) ? 1 : 0) + (version == 1 && (flags & 0x02) ? 1 : 0);
  m.Need(start, rank * c.sizeof_size * arrays);
  if (version == 2 && m.Uint(3, 1) == 2) return 0;  // a null dataspace
  uint64_t elements = 1;
  for (uint64_t d = 0; d < rank; ++d) {
    const auto product = CheckedMul(elements, m.Uint(start + d * c.sizeof_size, c.sizeof_size));
    if (!product) return std::nullopt;
    elements = *product;
  }
  return elements;
}

size_t CheckDatatypeMessage(const Hdf5MessageContext& c, const Bytes& m, size_t at, int depth) {
  if (depth > kMaxTypeDepth) c.Damaged(fmt::format("datatype nested more than {} deep", depth));
  const uint64_t cv = m.Uint(at, 1);
  const unsigned cls = cv & 0x0f;
  const unsigned version = static_cast<unsigned>(cv >> 4);
  const uint64_t bits = m.Uint(at + 1, 3);
  const uint64_t size = m.Uint(at + 4, 4);
  if (version == 4 || version == 5) {
    c.Unsupported(fmt::format(
        "datatype message version {} (the format of HDF5 {}) is not supported: gpufeed reads "
        "datatype versions 1 to 3 (HDF5 1.10's format); {}",
        version, version == 4 ? "1.12 and later" : "2.0", kRewriteOlderFormat));
  }
  if (version < 1 || version > 3) c.Damaged(fmt::format("datatype version {}", version));
  if (size == 0 && cls != 9) c.Damaged(fmt::format("datatype of class {} with size 0", cls));
  size_t pos = at + 8;
  switch (cls) {
    case 0:  // fixed-point: bit offset, precision
    case 4:  // bitfield
      m.Need(pos, 4);
      return pos + 4 - at;
    case 1:  // floating point
      m.Need(pos, 12);
      return pos + 12 - at;
    case 2:  // time
      m.Need(pos, 2);
      return pos + 2 - at;
    case 3:  // string
    case 7:  // reference
      return pos - at;
    case 5:  // opaque: an ASCII tag of (bits & 0xff) bytes
      m.Need(pos, bits & 0xff);
      return pos + (bits & 0xff) - at;
    case 6:
      return CompoundMembers(c, m, pos, version, bits, size, depth) - at;
    case 8:
      return EnumMembers(c, m, pos, version, bits, size, depth) - at;
    case 9:  // variable length: base type
      pos += CheckDatatypeMessage(c, m, pos, depth + 1);
      return pos - at;
    case 10: {  // array
      const uint64_t rank = m.Uint(pos, 1);
      if (rank == 0 || rank > kMaxRank) c.Damaged(fmt::format("array datatype of rank {}", rank));
      pos += version < 3 ? 4 + 8 * rank : 1 + 4 * rank;
      m.Need(pos, 0);
      pos += CheckDatatypeMessage(c, m, pos, depth + 1);
      return pos - at;
    }
    default:
      c.Damaged(fmt::format("datatype class {}", cls));
  }
}

void CheckFillMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  if (version == 1 || version == 2) {
    const uint64_t defined = m.Uint(3, 1);
    if (version == 1 || defined) m.Need(8, m.Uint(4, 4));
  } else if (version == 3) {
    const uint64_t flags = m.Uint(1, 1);
    if (flags & 0x20) m.Need(6, m.Uint(2, 4));
  } else {
    c.Damaged(fmt::format("fill value version {}", version));
  }
}

namespace {

// Versions 1 and 2 (HDF5 File Format Specification, "Data Layout Message"; libhdf5's
// H5O__layout_decode): dimensionality, class, 5 reserved bytes, the address (contiguous and
// chunked only), then 4 bytes per dimension (for chunked, the chunk shape with the element
// size last; skipped otherwise), then for compact the data size and the data.
std::optional<uint64_t> CheckLayoutMessageV1(const Hdf5MessageContext& c, const Bytes& m,
                                             uint64_t version) {
  const uint64_t dims = m.Uint(1, 1);
  const uint64_t cls = m.Uint(2, 1);
  if (dims == 0 || dims > kMaxLayoutDims || cls > 2 || (cls == 2 && dims < 2)) {
    c.Damaged(fmt::format("layout version {}: {} dimensions, class {}", version, dims, cls));
  }
  size_t pos = 8 + (cls != 0 ? c.sizeof_addr : 0);
  if (cls == 2) {
    for (uint64_t d = 0; d < dims; ++d) {
      if (m.Uint(pos + 4 * d, 4) == 0) c.Damaged(fmt::format("chunk dimension {} is 0", d));
    }
  }
  pos += 4 * dims;
  if (cls != 0) {
    m.Need(pos, 0);
    return std::nullopt;
  }
  const uint64_t size = m.Uint(pos, 4);
  m.Need(pos + 4, size);
  return size;
}

}  // namespace

std::optional<uint64_t> CheckLayoutMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  if (version == 1 || version == 2) return CheckLayoutMessageV1(c, m, version);
  if (version == 5) {
    c.Unsupported(fmt::format(
        "data layout message version 5 (HDF5 2.0's format, which h5py built on HDF5 2.x "
        "writes under libver='latest' or 'v200') is not supported: gpufeed reads layout "
        "versions 1 to 4 (HDF5 1.10's format); {}",
        kRewriteOlderFormat));
  }
  if (version != 3 && version != 4) c.Damaged(fmt::format("layout version {}", version));
  // Versions 3 and 4 share compact (class 0) and contiguous (class 1); they differ in how a
  // chunked layout (class 2) is encoded, and only version 4 has virtual datasets (class 3).
  const uint64_t cls = m.Uint(1, 1);
  if (cls == 0) {
    const uint64_t size = m.Uint(2, 2);
    m.Need(4, size);
    return size;
  }
  if (cls == 1) {
    m.Need(2, c.sizeof_addr + c.sizeof_size);
  } else if (cls == 2 && version == 3) {
    const uint64_t dims = m.Uint(2, 1);
    if (dims < 2 || dims > kMaxLayoutDims) {
      c.Damaged(fmt::format("chunked layout of {} dims", dims));
    }
    m.Need(3 + c.sizeof_addr, 4 * dims);
    for (uint64_t d = 0; d < dims; ++d) {
      if (m.Uint(3 + c.sizeof_addr + 4 * d, 4) == 0) {
        c.Damaged(fmt::format("chunk dimension {} is 0", d));
      }
    }
  } else if (cls == 2) {
    CheckChunkedLayoutV4(c, m);
  } else if (cls == 3 && version == 4) {
    m.Need(2, c.sizeof_addr + 4);
  } else {
    c.Damaged(fmt::format("layout version {} class {}", version, cls));
  }
  return std::nullopt;
}

void CheckPipelineMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  const uint64_t filters = m.Uint(1, 1);
  if ((version != 1 && version != 2) || filters > kMaxFilters) {
    c.Damaged(fmt::format("filter pipeline version {} with {} filters", version, filters));
  }
  size_t pos = version == 1 ? 8 : 2;
  for (uint64_t i = 0; i < filters; ++i) {
    const uint64_t id = m.Uint(pos, 2);
    pos += 2;
    uint64_t name_length = 0;
    if (version == 1 || id >= 256) {
      name_length = m.Uint(pos, 2);
      pos += 2;
    }
    pos += 2;  // flags
    const uint64_t values = m.Uint(pos, 2);
    pos += 2;
    if (name_length > 0) {
      m.Need(pos, name_length);
      m.Sub(pos, name_length).StringAt(0);  // libhdf5 copies it as a C string
      pos += name_length;
    }
    pos += 4 * values;
    if (version == 1 && values % 2 == 1) pos += 4;
    m.Need(pos, 0);
  }
}

void CheckGroupInfoMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  const uint64_t flags = m.Uint(1, 1);
  if (version != 0 || (flags & ~uint64_t{0x03}) != 0) {
    c.Damaged(fmt::format("group info version {} flags 0x{:02x}", version, flags));
  }
  m.Need(2, ((flags & 0x01) ? 4 : 0) + ((flags & 0x02) ? 4 : 0));
}

void CheckDriverInfoMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  if (version != 0) c.Damaged(fmt::format("driver info version {}", version));
  m.Need(11, m.Uint(9, 2));  // version, 8-byte driver name, length, data
}

void CheckFileSpaceInfoMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  if (version == 0) {
    m.Need(1, 1 + c.sizeof_size);  // strategy, threshold
  } else if (version == 1) {
    // strategy, persist, threshold, page size, page end threshold, EOA before allocation
    m.Need(1, 2 + 3 * c.sizeof_size + 2);
  } else {
    c.Damaged(fmt::format("file space info version {}", version));
  }
}

void CheckSharedTableMessage(const Hdf5MessageContext& c, const Bytes& m) {
  const uint64_t version = m.Uint(0, 1);
  if (version != 0) c.Damaged(fmt::format("shared message table version {}", version));
  m.Need(1, c.sizeof_addr + 1);
}

void CheckCompactLayout(const Hdf5MessageContext& c, const Hdf5DatasetMessages& m) {
  if (!m.has_dataspace || !m.type_size) {
    c.Damaged(fmt::format("a compact layout of {} bytes without a dataspace or datatype",
                          *m.compact_size));
  }
  const auto needed = m.elements ? CheckedMul(*m.elements, *m.type_size) : std::nullopt;
  if (!needed || *needed != *m.compact_size) {
    c.Damaged(fmt::format(
        "the compact layout holds {} bytes for {} elements of {} bytes", *m.compact_size,
        m.elements ? std::to_string(*m.elements) : std::string("2^64 or more"), *m.type_size));
  }
}

}  // namespace gpufeed
