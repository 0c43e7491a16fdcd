// The `.idx` of a Megatron-LM / NeMo indexed data set (megatron/core/datasets/indexed_dataset.py,
// _IndexWriter), read from untrusted bytes. All fields little-endian:
//
//   offset 0   magic "MMIDIDX\0\0" (9 bytes)
//          9   version, uint64: 1
//         17   dtype code, uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//              7 float32, 8 uint16 (Megatron's DType enum)
//         18   sequence count S, uint64
//         26   document count D, uint64 (the document index's entries: documents + 1)
//         34   S int32 sequence lengths (items), S int64 sequence pointers (byte offsets into
//              the .bin), D int64 document indices ([0, ..., S]: document d is sequences
//              [idx[d], idx[d+1]))
//   then, only in a multimodal data set, S int8 sequence modes.
//
// The checks (each refusal an Error(kCorruptData) naming the file, what was read and what was
// expected): the magic, version 1, a known dtype code, a file size of exactly the header and
// the three arrays (so no count is believed before the file's size bears it out); per
// sequence a length >= 0 and a pointer >= 0 whose items lie within the .bin; document indices
// from 0, never running backwards, ending at S. Megatron writes the sequences end to end
// (pointer[i+1] = pointer[i] + length[i] * itemsize); that is not required, since each
// sequence is checked against the .bin alone and a reader needs nothing more. A file with
// sequence modes after the document index is refused as Error(kUnsupported): its sequences
// are not all tokens.
//
// Thread-safety: pure functions; IdxBytes is a view (the caller keeps the bytes and the path
// alive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>

#include "gpufeed/dtype.h"

namespace gpufeed {

inline constexpr char kIndexedMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexedHeaderBytes = 34;

// A bounds-checked little-endian view of bytes of the .idx at file offset `at`; a field past
// its end throws Error(kCorruptData) naming the file, `what` was read and where.
class IdxBytes {
 public:
  IdxBytes(std::span<const uint8_t> bytes, uint64_t at, const std::string* path)
      : b_(bytes), at_(at), path_(path) {}
  size_t size() const { return b_.size(); }
  // Throws unless `width` bytes at `pos` lie within the view.
  void Need(size_t pos, size_t width, const char* what) const;
  // `width` (at most 8) bytes at `pos` (relative to the view) as an unsigned little-endian integer.
  uint64_t Uint(size_t pos, size_t width, const char* what) const;
  int64_t Int64(size_t pos, const char* what) const {
    return static_cast<int64_t>(Uint(pos, 8, what));
  }
  int32_t Int32(size_t pos, const char* what) const {
    return static_cast<int32_t>(static_cast<uint32_t>(Uint(pos, 4, what)));
  }

 private:
  std::span<const uint8_t> b_;
  uint64_t at_;
  const std::string* path_;
};

// The header, and where the arrays lie in the .idx.
struct IndexedHeader {
  DType dtype = DType::kInt32;
  uint8_t dtype_code = 4;
  size_t item_bytes = 4;
  int64_t sequences = 0;
  int64_t documents = 0;  // entries of the document index (documents + 1)
  uint64_t lengths_at = kIndexedHeaderBytes;
  uint64_t pointers_at = kIndexedHeaderBytes;
  uint64_t documents_at = kIndexedHeaderBytes;
  uint64_t end = kIndexedHeaderBytes;  // the file's size
};

// The dtype Megatron's code names, and its size; false for a code it does not define.
bool IndexedDType(uint8_t code, DType* dtype);

// Parses the first kIndexedHeaderBytes of the .idx at `idx_path` (`head` may be shorter: a
// file that ends early) and checks the counts against the file's size `idx_size`.
IndexedHeader ParseIndexedHeader(std::span<const uint8_t> head, uint64_t idx_size,
                                 const std::string& idx_path);

// Reads `n` bytes at offset `offset` of the .idx into `dst`, whole, or throws.
using IdxReader = std::function<void(uint64_t offset, void* dst, size_t n)>;

// What the arrays add up to, once checked.
struct IndexedTotals {
  int64_t items = 0;  // the sum of the sequence lengths
  int64_t longest = 0;
};

// Checks every length, pointer and document index of `header`'s arrays, read through `read`
// in blocks (memory stays small whatever the counts), against the .bin's size `bin_size`.
IndexedTotals CheckIndexedArrays(const IndexedHeader& header, const IdxReader& read,
                                 uint64_t bin_size, const std::string& idx_path,
                                 const std::string& bin_path);

// Little-endian loads from bytes already checked to lie within the arrays.
inline int32_t LoadLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return static_cast<int32_t>(v);
}
inline int64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return static_cast<int64_t>(v);
}

}  // namespace gpufeed
