#include "sources/hdf5/format/metadata_bytes.h"

namespace gpufeed {
namespace {

inline uint32_t Rot(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

inline void Mix(uint32_t& a, uint32_t& b, uint32_t& c) {
  a -= c;
  a ^= Rot(c, 4);
  c += b;
  b -= a;
  b ^= Rot(a, 6);
  a += c;
  c -= b;
  c ^= Rot(b, 8);
  b += a;
  a -= c;
  a ^= Rot(c, 16);
  c += b;
  b -= a;
  b ^= Rot(a, 19);
  a += c;
  c -= b;
  c ^= Rot(b, 4);
  b += a;
}

inline void Final(uint32_t& a, uint32_t& b, uint32_t& c) {
  c ^= b;
  c -= Rot(b, 14);
  a ^= c;
  a -= Rot(c, 11);
  b ^= a;
  b -= Rot(a, 25);
  c ^= b;
  c -= Rot(b, 16);
  a ^= c;
  a -= Rot(c, 4);
  b ^= a;
  b -= Rot(a, 14);
  c ^= b;
  c -= Rot(b, 24);
}

}  // namespace

// libhdf5's H5_checksum_lookup3 (byte-at-a-time form of hashlittle), initval 0.
uint32_t Hdf5MetadataChecksum(std::span<const uint8_t> bytes) {
  const uint8_t* k = bytes.data();
  size_t length = bytes.size();
  uint32_t a, b, c;
  a = b = c = 0xdeadbeef + static_cast<uint32_t>(length);
  while (length > 12) {
    a += k[0] + (uint32_t{k[1]} << 8) + (uint32_t{k[2]} << 16) + (uint32_t{k[3]} << 24);
    b += k[4] + (uint32_t{k[5]} << 8) + (uint32_t{k[6]} << 16) + (uint32_t{k[7]} << 24);
    c += k[8] + (uint32_t{k[9]} << 8) + (uint32_t{k[10]} << 16) + (uint32_t{k[11]} << 24);
    Mix(a, b, c);
    length -= 12;
    k += 12;
  }
  switch (length) {
    case 12:
      c += uint32_t{k[11]} << 24;
      [[fallthrough]];
    case 11:
      c += uint32_t{k[10]} << 16;
      [[fallthrough]];
    case 10:
      c += uint32_t{k[9]} << 8;
      [[fallthrough]];
    case 9:
      c += k[8];
      [[fallthrough]];
    case 8:
      b += uint32_t{k[7]} << 24;
      [[fallthrough]];
    case 7:
      b += uint32_t{k[6]} << 16;
      [[fallthrough]];
    case 6:
      b += uint32_t{k[5]} << 8;
      [[fallthrough]];
    case 5:
      b += k[4];
      [[fallthrough]];
    case 4:
      a += uint32_t{k[3]} << 24;
      [[fallthrough]];
    case 3:
      a += uint32_t{k[2]} << 16;
      [[fallthrough]];
    case 2:
      a += uint32_t{k[1]} << 8;
      [[fallthrough]];
    case 1:
      a += k[0];
      break;
    case 0:
      return c;
  }
  Final(a, b, c);
  return c;
}

}  // namespace gpufeed
