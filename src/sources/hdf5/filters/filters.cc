#include "sources/hdf5/filters/filters.h"

#include <fmt/format.h>
#include <hdf5.h>

#include <cstring>
#include <limits>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/filters/codecs.h"

namespace gpufeed {
namespace {

[[noreturn]] void Corrupt(const std::string& reason) {
  throw Error(ErrorCode::kCorruptData, reason);
}

// H5Z's unshuffle: byte j of element i comes from plane j at position i; trailing bytes that
// do not make a whole element were stored as they are.
// The common element sizes: each element written whole, from its byte in every plane, so the
// writes stream and the compiler unrolls the planes.
template <size_t kSize>
void UnshuffleFixed(const std::byte* in, std::byte* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < kSize; ++j) out[i * kSize + j] = in[j * n + i];
  }
}

void Unshuffle(std::span<const std::byte> in, std::span<std::byte> out, size_t element_size) {
  const size_t n = in.size() / element_size;
  const size_t done = n * element_size;
  if (element_size == 2 || element_size == 4 || element_size == 8) {
    if (element_size == 2) UnshuffleFixed<2>(in.data(), out.data(), n);
    if (element_size == 4) UnshuffleFixed<4>(in.data(), out.data(), n);
    if (element_size == 8) UnshuffleFixed<8>(in.data(), out.data(), n);
    std::memcpy(out.data() + done, in.data() + done, in.size() - done);
    return;
  }
  for (size_t j = 0; j < element_size; ++j) {
    const std::byte* plane = in.data() + j * n;
    std::byte* dst = out.data() + j;
    for (size_t i = 0; i < n; ++i) dst[i * element_size] = plane[i];
  }
  std::memcpy(out.data() + done, in.data() + done, in.size() - done);
}

uint32_t LoadLe32(const std::byte* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Filters that keep the size of what they decode.
bool KeepsSize(const Hdf5Filter& f) {
  return f.id == kHdf5FilterShuffle ||
         (f.id == kHdf5FilterBitshuffle && (f.cd_values.size() < 5 || f.cd_values[4] == 0));
}

struct KnownFilter {
  int id;
  const char* name;
  const char* provider;
};

// The HDF Group's registered filters users meet, and where each comes from.
constexpr KnownFilter kKnownFilters[] = {
    {1, "deflate", "built into libhdf5"},
    {2, "shuffle", "built into libhdf5"},
    {3, "fletcher32", "built into libhdf5"},
    {4, "szip", "libhdf5 built with libaec (Debian's libhdf5 is)"},
    {5, "nbit", "built into libhdf5"},
    {6, "scaleoffset", "built into libhdf5"},
    {305, "lzo", "PyTables (pip: tables)"},
    {307, "bzip2", "Debian: hdf5-filter-plugin; pip: hdf5plugin"},
    {32000, "lzf", "decoded by gpufeed; Debian: hdf5-plugin-lzf; pip: h5py"},
    {32001, "blosc",
     "decoded by gpufeed; Debian: hdf5-filter-plugin-blosc-serial; pip: hdf5plugin"},
    {32002, "mafisc", "the MAFISC plugin (no Debian or pip package)"},
    {32003, "snappy", "the HDF Group's hdf5_plugins (no Debian package)"},
    {32004, "lz4", "decoded by gpufeed; Debian: hdf5-filter-plugin; pip: hdf5plugin"},
    {32008, "bitshuffle", "decoded by gpufeed; Debian: bitshuffle; pip: hdf5plugin"},
    {32013, "zfp", "Debian: hdf5-filter-plugin-zfp-serial; pip: hdf5plugin"},
    {32014, "fpzip", "the fpzip plugin (no Debian or pip package)"},
    {32015, "zstd", "decoded by gpufeed; pip: hdf5plugin"},
    {32017, "sz", "pip: hdf5plugin"},
    {32018, "fcidecomp", "pip: hdf5plugin"},
    {32019, "jpeg", "the HDF Group's hdf5_plugins (no Debian package)"},
    {32020, "vbz", "Oxford Nanopore's vbz plugin (pip: ont-fast5-api ships it)"},
    {32022, "bitgroom", "the CCR plugins (no Debian package)"},
    {32023, "granularbr", "the CCR plugins (no Debian package)"},
    {32024, "sz3", "pip: hdf5plugin"},
    {32026, "blosc2", "pip: hdf5plugin"},
};

}  // namespace

bool IsDecodableHdf5Filter(int id) {
  switch (id) {
    case kHdf5FilterDeflate:
    case kHdf5FilterShuffle:
    case kHdf5FilterFletcher32:
    case kHdf5FilterLzf:
    case kHdf5FilterBlosc:
    case kHdf5FilterLz4:
    case kHdf5FilterBitshuffle:
    case kHdf5FilterZstd:
      return true;
    default:
      return false;
  }
}

std::string Hdf5FilterName(int id) {
  for (const auto& k : kKnownFilters) {
    if (k.id == id) return k.name;
  }
  return "";
}

std::string Hdf5FilterProvider(int id) {
  for (const auto& k : kKnownFilters) {
    if (k.id == id) return k.provider;
  }
  return "an HDF5 filter plugin: look the id up in the HDF Group's registered filter list; "
         "pip's hdf5plugin provides the common ones";
}

void RequireHdf5LibraryFilters(const std::vector<Hdf5Filter>& filters, const std::string& what) {
  for (const auto& f : filters) {
    if (IsDecodableHdf5Filter(f.id)) continue;
    // H5Zfilter_avail loads the plugin from libhdf5's plugin path when it is not registered.
    const htri_t avail = H5Zfilter_avail(static_cast<H5Z_filter_t>(f.id));
    if (avail > 0) continue;
    H5Eclear2(H5E_DEFAULT);
    const std::string known = Hdf5FilterName(f.id);
    const std::string name = !f.name.empty() ? f.name : known.empty() ? "unnamed" : known;
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: uses HDF5 filter {} ({}), which neither gpufeed nor libhdf5 "
                            "can decode here: no plugin for it in libhdf5's plugin path "
                            "(HDF5_PLUGIN_PATH). It comes from {}",
                            what, f.id, name, Hdf5FilterProvider(f.id)));
  }
}

namespace {
// A bound for what a filter decodes to when another decompressing filter still follows it:
// the chunk plus what compressors add to data that does not compress.
size_t IntermediateBound(size_t chunk_bytes) {
  const auto bound = CheckedAdd(chunk_bytes, chunk_bytes / 64 + 65536);
  return bound ? static_cast<size_t>(*bound) : chunk_bytes;
}
}  // namespace

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
    } else if (f.id == kHdf5FilterBlosc && f.cd_values.size() >= 7) {
      static constexpr const char* kCodecs[] = {"blosclz", "lz4",  "lz4hc",
                                                "snappy",  "zlib", "zstd"};
      static constexpr const char* kShuffles[] = {"", " + byte shuffle", " + bitshuffle"};
      const unsigned codec = f.cd_values[6], shuffle = f.cd_values[5];
      out += fmt::format("blosc {}{}", codec < 6 ? kCodecs[codec] : "?",
                         shuffle < 3 ? kShuffles[shuffle] : "");
    } else if (f.id == kHdf5FilterBitshuffle) {
      const unsigned c = f.cd_values.size() >= 5 ? f.cd_values[4] : 0;
      out += c == 2 ? "bitshuffle + lz4" : c == 3 ? "bitshuffle + zstd" : "bitshuffle";
    } else {
      const std::string known = Hdf5FilterName(f.id);
      out += !known.empty() ? known : f.name.empty() ? fmt::format("filter {}", f.id) : f.name;
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

namespace {

// Runs the decompressing filter `f` from `in` into `out`; returns the bytes produced.
size_t Decompress(const Hdf5Filter& f, std::span<const std::byte> in, std::span<std::byte> out,
                  bool exact, size_t element_size) {
  switch (f.id) {
    case kHdf5FilterDeflate:
      return DecodeDeflate(in, out, exact);
    case kHdf5FilterLzf:
      return DecodeLzf(in, out, exact);
    case kHdf5FilterBlosc:
      return DecodeBlosc(in, out, exact);
    case kHdf5FilterLz4:
      return DecodeHdf5Lz4(in, out, exact);
    case kHdf5FilterZstd:
      return DecodeZstd(in, out, exact);
    case kHdf5FilterBitshuffle: {
      const auto& cd = f.cd_values;
      const size_t es = cd.size() >= 3 && cd[2] != 0 ? cd[2] : element_size;
      return DecodeBitshuffle(in, out, exact, es, cd.size() >= 4 ? cd[3] : 0,
                              cd.size() >= 5 ? cd[4] : 0);
    }
    default:
      Corrupt(fmt::format("filter {} cannot be decoded here", f.id));
  }
}

}  // namespace

void DecodeHdf5Chunk(std::span<const std::byte> raw, const std::vector<Hdf5Filter>& filters,
                     uint32_t filter_mask, size_t element_size, std::span<std::byte> out,
                     std::vector<std::byte>& scratch) {
  // The active filters in decode order (the reverse of write order).
  const size_t n = std::min<size_t>(filters.size(), 32);
  const Hdf5Filter* steps[32];
  size_t active = 0;
  for (size_t k = n; k-- > 0;) {
    if (!(filter_mask & (1u << k))) steps[active++] = &filters[k];
  }
  // `cur` is the data so far; each step writes into `out` (when its output must be the
  // chunk) or into the scratch buffer `cur` does not lie in, never the buffer it reads.
  thread_local std::vector<std::byte> second;
  std::vector<std::byte>* bufs[2] = {&scratch, &second};
  std::span<const std::byte> cur = raw;
  auto spare = [&](size_t bytes) -> std::span<std::byte> {
    std::vector<std::byte>* b = (!scratch.empty() && cur.data() >= scratch.data() &&
                                 cur.data() < scratch.data() + scratch.size())
                                    ? bufs[1]
                                    : bufs[0];
    if (b->size() < bytes) b->resize(bytes);
    return std::span<std::byte>(*b).first(bytes);
  };
  for (size_t s = 0; s < active; ++s) {
    const Hdf5Filter& f = *steps[s];
    if (f.id == kHdf5FilterFletcher32) {
      if (cur.size() < 4) Corrupt("chunk too short for its fletcher32 checksum");
      const auto body = cur.first(cur.size() - 4);
      const uint32_t stored = LoadLe32(cur.data() + body.size());
      const uint32_t sum = Hdf5Fletcher32(body);
      // libhdf5 before 1.6.3 stored the sum with the bytes of each half swapped; it still
      // accepts both, so do we.
      const uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum & 0xff00ff00u) >> 8);
      if (stored != sum && stored != swapped) {
        Corrupt(fmt::format("fletcher32 checksum mismatch (stored {:08x}, computed {:08x})", stored,
                            sum));
      }
      cur = body;
      continue;
    }
    // The output must be the chunk when every later step keeps the size.
    bool exact = true;
    for (size_t t = s + 1; t < active; ++t) exact = exact && KeepsSize(*steps[t]);
    const bool into_out = exact && s + 1 == active;
    if (f.id == kHdf5FilterShuffle) {
      if (exact && cur.size() != out.size()) {
        Corrupt(fmt::format("chunk holds {} bytes, expected {}", cur.size(), out.size()));
      }
      const size_t size = f.cd_values.empty() ? element_size : f.cd_values[0];
      const std::span<std::byte> dst = into_out ? out : spare(cur.size());
      // As libhdf5: an element size of 0 or 1, or fewer than two elements, was stored
      // unshuffled (and a size from a damaged file must not drive the loop).
      if (size <= 1 || cur.size() / size <= 1) {
        if (!cur.empty()) std::memmove(dst.data(), cur.data(), cur.size());
      } else {
        Unshuffle(cur, dst, size);
      }
      cur = dst;
      continue;
    }
    const size_t cap = exact ? out.size() : IntermediateBound(out.size());
    const std::span<std::byte> dst = into_out ? out : spare(cap);
    cur = dst.first(Decompress(f, cur, dst, exact, element_size));
  }
  if (cur.data() != out.data()) {
    // Every filter skipped for this chunk (or none), or a checksum last: the bytes are the data.
    if (cur.size() != out.size()) {
      Corrupt(fmt::format("chunk holds {} bytes, expected {}", cur.size(), out.size()));
    }
    if (!cur.empty()) std::memcpy(out.data(), cur.data(), cur.size());
  }
}

}  // namespace gpufeed
