// Bounds-checked little-endian views of HDF5 metadata read from an untrusted file, and the
// metadata checksum (Bob Jenkins' lookup3, as libhdf5's H5_checksum_metadata computes it).
//
// A field past the end of its structure is a damaged file: every read of a field goes through
// Bytes, which throws Error(kCorruptData) naming the structure instead of reading out of bounds.
//
// Thread-safety: Bytes is a view (the caller keeps the bytes and the name alive); the checksum
// is a pure function.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "gpufeed/error.h"

namespace gpufeed {

// lookup3's hashlittle() with an initial value of 0: the checksum HDF5 stores after its
// version-2 metadata (object headers, B-tree nodes, fixed and extensible arrays, heaps).
uint32_t Hdf5MetadataChecksum(std::span<const uint8_t> bytes);

// A version-2 object header ("OHDR") opens with its signature, version and flags, then the
// times (flag 0x20) and attribute phase changes (flag 0x10) when present, then the size of
// chunk 0 in 1, 2, 4 or 8 bytes (flags & 0x03). Where that size field starts, and its width.
struct ObjectHeaderV2Prefix {
  size_t chunk0_size_at = 6;
  size_t chunk0_size_width = 1;
  bool tracks_attribute_order = false;
};
inline ObjectHeaderV2Prefix ParseObjectHeaderV2Prefix(uint64_t flags) {
  ObjectHeaderV2Prefix p;
  p.tracks_attribute_order = (flags & 0x04) != 0;
  if (flags & 0x20) p.chunk0_size_at += 16;
  if (flags & 0x10) p.chunk0_size_at += 4;
  p.chunk0_size_width = size_t{1} << (flags & 0x03);
  return p;
}

// A bounds-checked view of one structure's bytes; `where` names it in errors.
class Bytes {
 public:
  Bytes(std::span<const uint8_t> b, const std::string* where) : b_(b), where_(where) {}
  size_t size() const { return b_.size(); }
  std::span<const uint8_t> span() const { return b_; }
  uint64_t Uint(size_t pos, size_t width) const {
    Need(pos, width);
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i) v |= uint64_t{b_[pos + i]} << (8 * i);
    return v;
  }
  bool Has(size_t pos, size_t width) const {
    return pos <= b_.size() && width <= b_.size() - pos;
  }
  void Need(size_t pos, size_t width) const {
    if (!Has(pos, width)) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: ends early ({} bytes, a field needs {} at {})", *where_,
                              b_.size(), width, pos));
    }
  }
  bool Signature(size_t pos, const char* sig) const {
    return pos <= b_.size() && b_.size() - pos >= 4 && std::memcmp(b_.data() + pos, sig, 4) == 0;
  }
  // Length of the NUL-terminated string at `pos` (without the NUL); throws when no NUL
  // follows inside the view.
  size_t StringAt(size_t pos) const {
    Need(pos, 1);
    const void* nul = std::memchr(b_.data() + pos, 0, b_.size() - pos);
    if (nul == nullptr) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: a name at {} has no terminating NUL", *where_, pos));
    }
    return static_cast<size_t>(static_cast<const uint8_t*>(nul) - (b_.data() + pos));
  }
  Bytes Sub(size_t pos, size_t n) const {
    Need(pos, n);
    return Bytes(b_.subspan(pos, n), where_);
  }
  // True when the last 4 bytes are the checksum of the bytes before them.
  bool ChecksumHolds() const {
    if (b_.size() < 4) return false;
    return Hdf5MetadataChecksum(b_.first(b_.size() - 4)) == Uint(b_.size() - 4, 4);
  }

 private:
  std::span<const uint8_t> b_;
  const std::string* where_;
};

}  // namespace gpufeed
