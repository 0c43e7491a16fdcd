#include "sources/hdf5_filters.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstring>
#include <limits>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

[[noreturn]] void Corrupt(const std::string& reason) {
  throw Error(ErrorCode::kCorruptData, reason);
}

// Inflates a zlib stream into exactly `out.size()` bytes.
void Inflate(std::span<const std::byte> in, std::span<std::byte> out) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) Corrupt("cannot start zlib");
  // zlib's counters are 32-bit; a chunk is at most 4 GiB by the HDF5 format.
  if (in.size() > std::numeric_limits<uInt>::max() ||
      out.size() > std::numeric_limits<uInt>::max()) {
    inflateEnd(&zs);
    Corrupt("chunk larger than 4 GiB");
  }
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&zs, Z_FINISH);
  const size_t produced = out.size() - zs.avail_out;
  const std::string msg = zs.msg != nullptr ? zs.msg : "";
  inflateEnd(&zs);
  if (rc == Z_STREAM_END && produced == out.size()) return;
  if (rc == Z_STREAM_END || rc == Z_BUF_ERROR) {
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) {
      Corrupt(
          fmt::format("deflate stream decodes to more than the {} bytes of a chunk", out.size()));
    }
    Corrupt(fmt::format("deflate stream decodes to {} bytes, the chunk holds {}", produced,
                        out.size()));
  }
  Corrupt(fmt::format("corrupt deflate stream (zlib: {})", msg.empty() ? zError(rc) : msg));
}

// H5Z's unshuffle: byte j of element i comes from plane j at position i; trailing bytes that
// do not make a whole element were stored as they are.
void Unshuffle(std::span<const std::byte> in, std::span<std::byte> out, size_t element_size) {
  const size_t n = in.size() / element_size;
  for (size_t j = 0; j < element_size; ++j) {
    const std::byte* plane = in.data() + j * n;
    std::byte* dst = out.data() + j;
    for (size_t i = 0; i < n; ++i) dst[i * element_size] = plane[i];
  }
  const size_t done = n * element_size;
  std::memcpy(out.data() + done, in.data() + done, in.size() - done);
}

uint32_t LoadLe32(const std::byte* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

bool IsDecodableHdf5Filter(int id) {
  return id == kHdf5FilterDeflate || id == kHdf5FilterShuffle || id == kHdf5FilterFletcher32;
}

std::string DescribeHdf5Filters(const std::vector<Hdf5Filter>& filters) {
  if (filters.empty()) return "none";
  std::string out;
  for (const auto& f : filters) {
    if (!out.empty()) out += " + ";
    if (f.id == kHdf5FilterDeflate) {
      out += f.cd_values.empty() ? "gzip" : fmt::format("gzip level {}", f.cd_values[0]);
    } else if (f.id == kHdf5FilterShuffle) {
      out += "shuffle";
    } else if (f.id == kHdf5FilterFletcher32) {
      out += "fletcher32";
    } else {
      out += f.name.empty() ? fmt::format("filter {}", f.id) : f.name;
    }
  }
  return out;
}

uint32_t Hdf5Fletcher32(std::span<const std::byte> data) {
  // Big-endian 16-bit words, sums folded every 360 words (H5checksum.c).
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t len = data.size() / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (len > 0) {
    size_t t = len > 360 ? 360 : len;
    len -= t;
    do {
      sum1 += (uint32_t{p[0]} << 8) | uint32_t{p[1]};
      p += 2;
      sum2 += sum1;
    } while (--t);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (data.size() % 2) {
    sum1 += uint32_t{*p} << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

void DecodeHdf5Chunk(std::span<const std::byte> raw, const std::vector<Hdf5Filter>& filters,
                     uint32_t filter_mask, size_t element_size, std::span<std::byte> out,
                     std::vector<std::byte>& scratch) {
  // `cur` is the data so far; each step writes either into `out` (the last step) or into a
  // scratch buffer, never the buffer it reads.
  std::span<const std::byte> cur = raw;
  std::vector<std::byte> a;
  int active = 0;
  for (size_t i = 0; i < filters.size(); ++i) {
    if (!(filter_mask & (1u << i))) ++active;
  }
  std::vector<std::byte>* bufs[2] = {&scratch, &a};
  int next_buf = 0;
  for (size_t k = filters.size(); k-- > 0;) {
    if (filter_mask & (1u << k)) continue;
    const Hdf5Filter& f = filters[k];
    const bool last = --active == 0;
    switch (f.id) {
      case kHdf5FilterFletcher32: {
        if (cur.size() < 4) Corrupt("chunk too short for its fletcher32 checksum");
        const auto body = cur.first(cur.size() - 4);
        const uint32_t stored = LoadLe32(cur.data() + body.size());
        const uint32_t sum = Hdf5Fletcher32(body);
        // libhdf5 before 1.6.3 stored the sum with the bytes of each half swapped; it still
        // accepts both, so do we.
        const uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum & 0xff00ff00u) >> 8);
        if (stored != sum && stored != swapped) {
          Corrupt(fmt::format("fletcher32 checksum mismatch (stored {:08x}, computed {:08x})",
                              stored, sum));
        }
        cur = body;
        if (last) {
          if (cur.size() != out.size()) {
            Corrupt(fmt::format("chunk holds {} bytes, expected {}", cur.size(), out.size()));
          }
          std::memcpy(out.data(), cur.data(), cur.size());
          cur = out;
        }
        break;
      }
      case kHdf5FilterDeflate: {
        std::span<std::byte> dst = out;
        if (!last) {
          bufs[next_buf]->resize(out.size());
          dst = *bufs[next_buf];
          next_buf ^= 1;
        }
        Inflate(cur, dst);
        cur = dst;
        break;
      }
      case kHdf5FilterShuffle: {
        const size_t size = f.cd_values.empty() ? element_size : f.cd_values[0];
        std::span<std::byte> dst = out;
        if (!last) {
          bufs[next_buf]->resize(cur.size());
          dst = *bufs[next_buf];
          next_buf ^= 1;
        } else if (cur.size() != out.size()) {
          Corrupt(fmt::format("chunk holds {} bytes, expected {}", cur.size(), out.size()));
        }
        // As libhdf5: an element size of 0 or 1, or fewer than two elements, was stored
        // unshuffled (and a size from a damaged file must not drive the loop).
        if (size <= 1 || cur.size() / size <= 1) {
          std::memmove(dst.data(), cur.data(), cur.size());
        } else {
          Unshuffle(cur, dst.first(cur.size()), size);
        }
        cur = dst.first(cur.size());
        break;
      }
      default:
        Corrupt(fmt::format("filter {} cannot be decoded here", f.id));
    }
  }
  if (active == 0 && cur.data() != out.data()) {
    // Every filter skipped for this chunk (or none): the stored bytes are the data.
    if (cur.size() != out.size()) {
      Corrupt(fmt::format("chunk holds {} bytes, expected {}", cur.size(), out.size()));
    }
    std::memcpy(out.data(), cur.data(), cur.size());
  }
}

}  // namespace gpufeed
