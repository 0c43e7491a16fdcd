#include "sources/hdf5/filters/codecs.h"

#include <blosc.h>
#include <fmt/format.h>
#include <libdeflate.h>
#include <liblzf/lzf.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

[[noreturn]] void Corrupt(const std::string& reason) {
  throw Error(ErrorCode::kCorruptData, reason);
}

uint64_t LoadBe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

uint32_t LoadBe32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | std::to_integer<uint32_t>(p[i]);
  return v;
}

// A declared decoded size checked against what the chunk may hold, before anything is written.
void CheckDeclared(const char* codec, uint64_t declared, size_t capacity, bool exact) {
  if (declared > capacity) {
    Corrupt(fmt::format("{} data declares {} decoded bytes, more than the {} of a chunk", codec,
                        declared, capacity));
  }
  if (exact && declared != capacity) {
    Corrupt(fmt::format("{} data declares {} decoded bytes, the chunk holds {}", codec, declared,
                        capacity));
  }
}

void CheckProduced(const char* codec, size_t produced, size_t capacity, bool exact) {
  if (exact && produced != capacity) {
    Corrupt(
        fmt::format("{} data decodes to {} bytes, the chunk holds {}", codec, produced, capacity));
  }
}

[[noreturn]] void TooLarge(const char* codec, size_t capacity) {
  Corrupt(fmt::format("{} data decodes to more than the {} bytes of a chunk", codec, capacity));
}

// One thread's decompression contexts, made on first use and freed when the thread ends.
struct ThreadContexts {
  libdeflate_decompressor* deflate = nullptr;
  ZSTD_DCtx* zstd = nullptr;
  std::vector<std::byte> block;  // one bitshuffle block, decompressed

  ThreadContexts() = default;
  ThreadContexts(const ThreadContexts&) = delete;
  ThreadContexts& operator=(const ThreadContexts&) = delete;
  ~ThreadContexts() {
    if (deflate != nullptr) libdeflate_free_decompressor(deflate);
    if (zstd != nullptr) ZSTD_freeDCtx(zstd);
  }
  libdeflate_decompressor* Deflate() {
    if (deflate == nullptr && (deflate = libdeflate_alloc_decompressor()) == nullptr) {
      throw std::bad_alloc();
    }
    return deflate;
  }
  ZSTD_DCtx* Zstd() {
    if (zstd == nullptr && (zstd = ZSTD_createDCtx()) == nullptr) throw std::bad_alloc();
    return zstd;
  }
};

ThreadContexts& Contexts() {
  thread_local ThreadContexts contexts;
  return contexts;
}

std::atomic<bool>& ZlibFlag() {
  static std::atomic<bool> flag = [] {
    const char* v = std::getenv("GPUFEED_HDF5_INFLATE");
    return v != nullptr && std::string(v) == "zlib";
  }();
  return flag;
}

// zlib's one-call inflate into at most out.size() bytes; the path before libdeflate, kept for
// measuring one against the other.
size_t InflateZlib(std::span<const std::byte> in, std::span<std::byte> out, bool exact) {
  // zlib's counters are 32-bit; a chunk is at most 4 GiB by the HDF5 format.
  if (in.size() > std::numeric_limits<uInt>::max() ||
      out.size() > std::numeric_limits<uInt>::max()) {
    Corrupt("chunk larger than 4 GiB");
  }
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) throw std::bad_alloc();
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&zs, Z_FINISH);
  const size_t produced = out.size() - zs.avail_out;
  const std::string msg = zs.msg != nullptr ? zs.msg : "";
  const bool full = zs.avail_out == 0;
  inflateEnd(&zs);
  if (rc == Z_STREAM_END) {
    CheckProduced("deflate", produced, out.size(), exact);
    return produced;
  }
  if (rc == Z_BUF_ERROR && full) TooLarge("deflate", out.size());
  if (rc == Z_BUF_ERROR) {
    Corrupt(fmt::format("deflate stream ends early, after {} decoded bytes", produced));
  }
  Corrupt(fmt::format("corrupt deflate stream (zlib: {})", msg.empty() ? zError(rc) : msg));
}

void Transpose8x8(uint64_t& x) {
  // Bit (r, c) of the 8x8 matrix whose row r is byte r of x moves to (c, r).
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
  x = x ^ t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
  x = x ^ t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
  x = x ^ t ^ (t << 28);
}

// bitshuffle's bshuf_default_block_size.
size_t DefaultBitshuffleBlock(size_t element_size) {
  size_t block = 8192 / element_size;
  block = block / 8 * 8;
  return std::max<size_t>(block, 128);
}

}  // namespace

void SetHdf5InflateWithZlib(bool zlib) { ZlibFlag().store(zlib); }
bool Hdf5InflateWithZlib() { return ZlibFlag().load(std::memory_order_relaxed); }

size_t DecodeDeflate(std::span<const std::byte> in, std::span<std::byte> out, bool exact) {
  if (Hdf5InflateWithZlib()) return InflateZlib(in, out, exact);
  size_t used = 0, produced = 0;
  const libdeflate_result r = libdeflate_zlib_decompress_ex(
      Contexts().Deflate(), in.data(), in.size(), out.data(), out.size(), &used, &produced);
  switch (r) {
    case LIBDEFLATE_SUCCESS:
      CheckProduced("deflate", produced, out.size(), exact);
      return produced;
    case LIBDEFLATE_INSUFFICIENT_SPACE:
      TooLarge("deflate", out.size());
    default:
      Corrupt("corrupt deflate stream (libdeflate: bad data)");
  }
}

size_t DecodeLzf(std::span<const std::byte> in, std::span<std::byte> out, bool exact) {
  if (in.size() > UINT_MAX || out.size() > UINT_MAX) Corrupt("chunk larger than 4 GiB");
  if (in.empty()) Corrupt("empty LZF chunk");
  errno = 0;
  const unsigned produced = lzf_decompress(in.data(), static_cast<unsigned>(in.size()), out.data(),
                                           static_cast<unsigned>(out.size()));
  if (produced == 0) {
    if (errno == E2BIG) TooLarge("LZF", out.size());
    Corrupt("corrupt LZF data");
  }
  CheckProduced("LZF", produced, out.size(), exact);
  return produced;
}

size_t DecodeBlosc(std::span<const std::byte> in, std::span<std::byte> out, bool exact) {
  size_t declared = 0;
  if (in.size() < BLOSC_MIN_HEADER_LENGTH ||
      blosc_cbuffer_validate(in.data(), in.size(), &declared) != 0) {
    Corrupt(fmt::format("not a valid Blosc buffer ({} bytes)", in.size()));
  }
  CheckDeclared("Blosc", declared, out.size(), exact);
  if (declared == 0) return 0;
  const int produced = blosc_decompress_ctx(in.data(), out.data(), out.size(), 1);
  if (produced < 0 || static_cast<size_t>(produced) != declared) {
    Corrupt(fmt::format("corrupt Blosc data (libblosc: {})", produced));
  }
  return declared;
}

size_t DecodeHdf5Lz4(std::span<const std::byte> in, std::span<std::byte> out, bool exact) {
  // HDF5's LZ4 filter (H5Zlz4.c): the decoded size (8 bytes, big-endian), the block size (4),
  // then per block its stored size (4) and its bytes; a block stored at its full size was
  // left uncompressed.
  if (in.size() < 12)
    Corrupt(fmt::format("LZ4 chunk of {} bytes, shorter than its header", in.size()));
  const uint64_t total = LoadBe64(in.data());
  uint64_t block = LoadBe32(in.data() + 8);
  CheckDeclared("LZ4", total, out.size(), exact);
  if (block > total) block = total;
  if (block == 0 && total > 0) Corrupt("LZ4 chunk with a block size of 0");
  if (block > static_cast<uint64_t>(INT_MAX)) {
    Corrupt(fmt::format("LZ4 block size {} is beyond LZ4's limit", block));
  }
  size_t pos = 12;
  uint64_t done = 0;
  while (done < total) {
    const auto n = static_cast<size_t>(std::min(block, total - done));
    if (in.size() - pos < 4) {
      Corrupt(fmt::format("LZ4 chunk truncated: no size for the block at decoded byte {}", done));
    }
    const uint32_t stored = LoadBe32(in.data() + pos);
    pos += 4;
    if (stored > in.size() - pos) {
      Corrupt(fmt::format("LZ4 block at decoded byte {} claims {} stored bytes, {} remain", done,
                          stored, in.size() - pos));
    }
    std::byte* dst = out.data() + done;
    if (stored == n) {
      std::memcpy(dst, in.data() + pos, n);
    } else {
      const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data() + pos),
                                          reinterpret_cast<char*>(dst), static_cast<int>(stored),
                                          static_cast<int>(n));
      if (got != static_cast<int>(n)) {
        Corrupt(
            fmt::format("corrupt LZ4 block at decoded byte {} ({} stored bytes)", done, stored));
      }
    }
    pos += stored;
    done += n;
  }
  return static_cast<size_t>(total);
}

size_t DecodeZstd(std::span<const std::byte> in, std::span<std::byte> out, bool exact) {
  const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) Corrupt("not a Zstd frame");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN) CheckDeclared("Zstd", declared, out.size(), exact);
  const size_t produced =
      ZSTD_decompressDCtx(Contexts().Zstd(), out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(produced)) {
    if (ZSTD_getErrorCode(produced) == ZSTD_error_dstSize_tooSmall) TooLarge("Zstd", out.size());
    Corrupt(fmt::format("corrupt Zstd data (libzstd: {})", ZSTD_getErrorName(produced)));
  }
  CheckProduced("Zstd", produced, out.size(), exact);
  return produced;
}

void BitshuffleBlock(const std::byte* in, std::byte* out, size_t n, size_t element_size) {
  // Bit b of byte j of element i goes to bit i%8 of byte i/8 of bit-row j*8+b; a row holds
  // n/8 bytes.
  const size_t row = n / 8;
  for (size_t j = 0; j < element_size; ++j) {
    std::byte* rows = out + j * 8 * row;
    for (size_t m = 0; m < row; ++m) {
      uint64_t x = 0;
      for (size_t k = 0; k < 8; ++k) {
        x |= std::to_integer<uint64_t>(in[(8 * m + k) * element_size + j]) << (8 * k);
      }
      Transpose8x8(x);
      for (size_t b = 0; b < 8; ++b) rows[b * row + m] = static_cast<std::byte>(x >> (8 * b));
    }
  }
}

void BitunshuffleBlock(const std::byte* in, std::byte* out, size_t n, size_t element_size) {
  const size_t row = n / 8;
  for (size_t j = 0; j < element_size; ++j) {
    const std::byte* rows = in + j * 8 * row;
    for (size_t m = 0; m < row; ++m) {
      uint64_t x = 0;
      for (size_t b = 0; b < 8; ++b) {
        x |= std::to_integer<uint64_t>(rows[b * row + m]) << (8 * b);
      }
      Transpose8x8(x);
      for (size_t k = 0; k < 8; ++k) {
        out[(8 * m + k) * element_size + j] = static_cast<std::byte>(x >> (8 * k));
      }
    }
  }
}

namespace {

// Decompresses the block of a compressed bitshuffle chunk at `pos` of `in` (its stored size,
// 4 bytes big-endian, then its LZ4 (compression 2) or Zstd (3) data) into the first `bytes` of
// `tmp`, and moves `pos` past it. `done`: the block's first element, for the messages.
void InflateBitshuffleBlock(std::span<const std::byte> in, size_t& pos, std::byte* tmp,
                            size_t bytes, unsigned compression, size_t done) {
  if (in.size() - pos < 4) {
    Corrupt(fmt::format("bitshuffle chunk truncated: no size for the block at element {}", done));
  }
  const uint32_t stored = LoadBe32(in.data() + pos);
  pos += 4;
  if (stored > in.size() - pos) {
    Corrupt(fmt::format("bitshuffle block at element {} claims {} stored bytes, {} remain", done,
                        stored, in.size() - pos));
  }
  size_t got = 0;
  if (compression == 2) {
    if (bytes > static_cast<size_t>(INT_MAX)) Corrupt("bitshuffle block beyond LZ4's limit");
    const int r = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data() + pos),
                                      reinterpret_cast<char*>(tmp), static_cast<int>(stored),
                                      static_cast<int>(bytes));
    got = r < 0 ? SIZE_MAX : static_cast<size_t>(r);
  } else {
    const size_t r = ZSTD_decompressDCtx(Contexts().Zstd(), tmp, bytes, in.data() + pos, stored);
    got = ZSTD_isError(r) ? SIZE_MAX : r;
  }
  if (got != bytes) {
    Corrupt(fmt::format("corrupt {} block in bitshuffle data at element {} ({} stored bytes)",
                        compression == 2 ? "LZ4" : "Zstd", done, stored));
  }
  pos += stored;
}

}  // namespace

size_t DecodeBitshuffle(std::span<const std::byte> in, std::span<std::byte> out, bool exact,
                        size_t element_size, size_t block_elements, unsigned compression) {
  if (element_size == 0) Corrupt("bitshuffle filter with an element size of 0");
  if (compression != 0 && compression != 2 && compression != 3) {
    throw Error(
        ErrorCode::kUnsupported,
        fmt::format("bitshuffle with compression {} (known: 0 none, 2 LZ4, 3 Zstd)", compression));
  }
  uint64_t total = in.size();
  size_t block = block_elements == 0 ? DefaultBitshuffleBlock(element_size) : block_elements;
  size_t pos = 0;
  if (compression != 0) {
    // bitshuffle's HDF5 framing: decoded bytes (8, big-endian), block bytes (4), then per
    // block its compressed size (4, big-endian) and data; the last elements that do not fill
    // a group of 8 follow as they are.
    if (in.size() < 12) {
      Corrupt(fmt::format("bitshuffle chunk of {} bytes, shorter than its header", in.size()));
    }
    total = LoadBe64(in.data());
    block = LoadBe32(in.data() + 8) / element_size;
    pos = 12;
  }
  CheckDeclared("bitshuffle", total, out.size(), exact);
  if (total % element_size != 0) {
    Corrupt(fmt::format("bitshuffle data of {} bytes is not a whole number of {}-byte elements",
                        total, element_size));
  }
  if (block == 0 || block % 8 != 0) {
    Corrupt(
        fmt::format("bitshuffle block of {} elements (must be a positive multiple of 8)", block));
  }
  const size_t elements = static_cast<size_t>(total) / element_size;
  std::vector<std::byte>& tmp = Contexts().block;
  if (compression != 0) tmp.resize(std::min(block, elements) * element_size);
  size_t done = 0;  // elements
  auto one_block = [&](size_t n) {
    const size_t bytes = n * element_size;
    std::byte* dst = out.data() + done * element_size;
    if (compression == 0) {
      BitunshuffleBlock(in.data() + done * element_size, dst, n, element_size);
    } else {
      InflateBitshuffleBlock(in, pos, tmp.data(), bytes, compression, done);
      BitunshuffleBlock(tmp.data(), dst, n, element_size);
    }
    done += n;
  };
  for (size_t b = 0; b < elements / block; ++b) one_block(block);
  const size_t last = elements % block / 8 * 8;
  if (last > 0) one_block(last);
  // Elements past the last group of 8 are stored as they are.
  const size_t rest = (elements - done) * element_size;
  const size_t from = compression == 0 ? done * element_size : pos;
  if (in.size() < from || in.size() - from < rest) {
    Corrupt(fmt::format("bitshuffle chunk truncated: {} trailing bytes missing", rest));
  }
  if (rest > 0) std::memcpy(out.data() + done * element_size, in.data() + from, rest);
  return static_cast<size_t>(total);
}

}  // namespace gpufeed
