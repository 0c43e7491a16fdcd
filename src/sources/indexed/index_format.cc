#include "sources/indexed/index_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// Entries checked per block of CheckIndexedArrays: 64 Ki sequences read 768 KB.
constexpr uint64_t kBlockEntries = uint64_t{1} << 16;

[[noreturn]] void Corrupt(const std::string& message) {
  throw Error(ErrorCode::kCorruptData, message);
}

std::string Printable(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t c : bytes) {
    out += (c >= 0x20 && c < 0x7f && c != '\\') ? std::string(1, static_cast<char>(c))
                                                : fmt::format("\\x{:02x}", c);
  }
  return out;
}

// The array sizes the counts claim, each checked; the file's size must be exactly their end.
void PlaceArrays(IndexedHeader& h, uint64_t idx_size, const std::string& path) {
  const uint64_t s = static_cast<uint64_t>(h.sequences);
  const uint64_t d = static_cast<uint64_t>(h.documents);
  const auto lengths = CheckedMul(s, 4);
  const auto pointers = CheckedMul(s, 8);
  const auto docs = CheckedMul(d, 8);
  std::optional<uint64_t> end;
  if (lengths && pointers && docs) {
    if (auto a = CheckedAdd(kIndexedHeaderBytes, *lengths)) {
      if (auto b = CheckedAdd(*a, *pointers)) end = CheckedAdd(*b, *docs);
    }
  }
  if (!end || *end > idx_size) {
    Corrupt(fmt::format(
        "{}: sequence count {} and document count {} need {} bytes; the file "
        "holds {}",
        path, s, d, end ? fmt::format("{}", *end) : std::string("more than 2^64"), idx_size));
  }
  h.lengths_at = kIndexedHeaderBytes;
  h.pointers_at = h.lengths_at + *lengths;
  h.documents_at = h.pointers_at + *pointers;
  h.end = *end;
  if (idx_size == *end) return;
  if (idx_size - *end == s) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: holds a mode per sequence after the document index (a "
                            "multimodal data set); gpufeed reads token corpora only",
                            path));
  }
  Corrupt(
      fmt::format("{}: {} bytes follow the document index; expected none ({} sequences, "
                  "{} document index entries: {} bytes, the file holds {})",
                  path, idx_size - *end, s, d, *end, idx_size));
}

}  // namespace

void IdxBytes::Need(size_t pos, size_t width, const char* what) const {
  if (pos > b_.size() || width > b_.size() - pos) {
    Corrupt(fmt::format("{}: ends early: the {} at byte {} needs {} bytes, {} are there", *path_,
                        what, at_ + pos, width, pos > b_.size() ? 0 : b_.size() - pos));
  }
}

uint64_t IdxBytes::Uint(size_t pos, size_t width, const char* what) const {
  GPUFEED_ASSERT(width <= 8, "IdxBytes::Uint reads at most 8 bytes");
  Need(pos, width, what);
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= uint64_t{b_[pos + i]} << (8 * i);
  return v;
}

bool IndexedDType(uint8_t code, DType* dtype) {
  // Megatron's DType enum, codes 1 to 8.
  static constexpr DType kByCode[] = {DType::kUInt8,   DType::kInt8,  DType::kInt16,
                                      DType::kInt32,   DType::kInt64, DType::kFloat64,
                                      DType::kFloat32, DType::kUInt16};
  if (code < 1 || code > std::size(kByCode)) return false;
  *dtype = kByCode[code - 1];
  return true;
}

IndexedHeader ParseIndexedHeader(std::span<const uint8_t> head, uint64_t idx_size,
                                 const std::string& idx_path) {
  const IdxBytes b(head.first(std::min<size_t>(head.size(), kIndexedHeaderBytes)), 0, &idx_path);
  b.Need(0, sizeof(kIndexedMagic), "magic");
  if (std::memcmp(head.data(), kIndexedMagic, sizeof(kIndexedMagic)) != 0) {
    Corrupt(
        fmt::format("{}: not a Megatron indexed data set index: it starts with \"{}\", "
                    "expected the magic \"MMIDIDX\\x00\\x00\"",
                    idx_path, Printable(head.first(sizeof(kIndexedMagic)))));
  }
  const uint64_t version = b.Uint(9, 8, "version");
  if (version != 1) {
    Corrupt(fmt::format("{}: index version {}; expected 1 (the only version Megatron writes)",
                        idx_path, version));
  }
  IndexedHeader h;
  h.dtype_code = static_cast<uint8_t>(b.Uint(17, 1, "dtype code"));
  if (!IndexedDType(h.dtype_code, &h.dtype)) {
    Corrupt(
        fmt::format("{}: dtype code {}; expected 1 to 8 (uint8, int8, int16, int32, int64, "
                    "float64, float32, uint16)",
                    idx_path, h.dtype_code));
  }
  h.item_bytes = DTypeSize(h.dtype);
  const uint64_t s = b.Uint(18, 8, "sequence count");
  const uint64_t d = b.Uint(26, 8, "document count");
  if (s > static_cast<uint64_t>(INT64_MAX) || d > static_cast<uint64_t>(INT64_MAX)) {
    Corrupt(fmt::format("{}: sequence count {} or document count {} exceeds 2^63", idx_path, s, d));
  }
  if (d == 0) {
    Corrupt(
        fmt::format("{}: document count 0; expected at least 1 (the document index opens "
                    "with 0 and ends with the sequence count)",
                    idx_path));
  }
  h.sequences = static_cast<int64_t>(s);
  h.documents = static_cast<int64_t>(d);
  PlaceArrays(h, idx_size, idx_path);
  return h;
}

namespace {

void CheckSequences(const IndexedHeader& h, const IdxReader& read, uint64_t bin_size,
                    const std::string& idx_path, const std::string& bin_path,
                    IndexedTotals& totals) {
  std::vector<uint8_t> lengths;
  std::vector<uint8_t> pointers;
  const uint64_t count = static_cast<uint64_t>(h.sequences);
  for (uint64_t first = 0; first < count; first += kBlockEntries) {
    const uint64_t n = std::min(kBlockEntries, count - first);
    lengths.resize(n * 4);
    pointers.resize(n * 8);
    read(h.lengths_at + first * 4, lengths.data(), lengths.size());
    read(h.pointers_at + first * 8, pointers.data(), pointers.size());
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t i = first + k;
      const int32_t length = LoadLe32(lengths.data() + k * 4);
      const int64_t pointer = LoadLe64(pointers.data() + k * 8);
      if (length < 0) {
        Corrupt(
            fmt::format("{}: sequence {}: length {} (read at byte {}); expected a count of "
                        "items, >= 0",
                        idx_path, i, length, h.lengths_at + i * 4));
      }
      // length < 2^31 and item_bytes <= 8: the product fits; the sum is checked.
      const uint64_t bytes = static_cast<uint64_t>(length) * h.item_bytes;
      const auto end = CheckedAdd(static_cast<uint64_t>(pointer), bytes);
      if (pointer < 0 || !end || *end > bin_size) {
        Corrupt(fmt::format(
            "{}: sequence {}: pointer {} and length {} ({} bytes of {}) run "
            "past the end of {} ({} bytes); expected them within it",
            idx_path, i, pointer, length, bytes, DTypeName(h.dtype), bin_path, bin_size));
      }
      totals.items += length;  // <= bin_size: no overflow
      totals.longest = std::max<int64_t>(totals.longest, length);
    }
  }
}

void CheckDocuments(const IndexedHeader& h, const IdxReader& read, const std::string& idx_path) {
  std::vector<uint8_t> block;
  const uint64_t count = static_cast<uint64_t>(h.documents);
  int64_t previous = 0;
  for (uint64_t first = 0; first < count; first += kBlockEntries) {
    const uint64_t n = std::min(kBlockEntries, count - first);
    block.resize(n * 8);
    read(h.documents_at + first * 8, block.data(), block.size());
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t j = first + k;
      const int64_t v = LoadLe64(block.data() + k * 8);
      if (j == 0 && v != 0) {
        Corrupt(fmt::format("{}: document index entry 0 is {}; expected 0", idx_path, v));
      }
      if (v < previous || v > h.sequences) {
        Corrupt(
            fmt::format("{}: document index entry {} is sequence {}; expected a sequence "
                        "from {} (the entry before) to {} (the sequence count)",
                        idx_path, j, v, previous, h.sequences));
      }
      previous = v;
    }
  }
  if (previous != h.sequences) {
    Corrupt(
        fmt::format("{}: the document index ends at sequence {}; expected it to end at the "
                    "sequence count, {}",
                    idx_path, previous, h.sequences));
  }
}

}  // namespace

IndexedTotals CheckIndexedArrays(const IndexedHeader& header, const IdxReader& read,
                                 uint64_t bin_size, const std::string& idx_path,
                                 const std::string& bin_path) {
  IndexedTotals totals;
  CheckSequences(header, read, bin_size, idx_path, bin_path, totals);
  CheckDocuments(header, read, idx_path);
  return totals;
}

}  // namespace gpufeed
