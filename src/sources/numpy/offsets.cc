#include "sources/numpy/offsets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "gpufeed/error.h"
#include "sources/numpy/npy_header.h"

namespace gpufeed {
namespace {

// Offsets are converted in slices of this many, so the raw bytes never need a second copy of
// the whole file.
constexpr int64_t kSlice = int64_t{1} << 16;

bool IsIntegerDType(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

// Offset `i` of raw little-endian elements of `dtype` at `at`; uint64 above INT64_MAX becomes
// -1 (refused as out of range by the caller).
int64_t OffsetAt(const std::byte* at, DType dtype) {
  switch (dtype) {
#define GPUFEED_OFFSET_CASE(kind, T) \
  case DType::kind: {                \
    T v;                             \
    std::memcpy(&v, at, sizeof(v));  \
    return static_cast<int64_t>(v);  \
  }
    GPUFEED_OFFSET_CASE(kInt8, int8_t)
    GPUFEED_OFFSET_CASE(kInt16, int16_t)
    GPUFEED_OFFSET_CASE(kInt32, int32_t)
    GPUFEED_OFFSET_CASE(kInt64, int64_t)
    GPUFEED_OFFSET_CASE(kUInt8, uint8_t)
    GPUFEED_OFFSET_CASE(kUInt16, uint16_t)
    GPUFEED_OFFSET_CASE(kUInt32, uint32_t)
#undef GPUFEED_OFFSET_CASE
    case DType::kUInt64: {
      uint64_t v;
      std::memcpy(&v, at, sizeof(v));
      return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? -1
                 : static_cast<int64_t>(v);
    }
    default:
      break;
  }
  GPUFEED_ASSERT(false, "offsets of a dtype that is not an integer");
  return -1;
}

}  // namespace

std::vector<int64_t> ReadNpyOffsets(const File& file, int64_t items,
                                    const std::string& values_path) {
  const std::string& path = file.path();
  const NpyHeader header = ReadNpyHeader(file);
  if (!IsIntegerDType(header.dtype)) {
    throw Error(ErrorCode::kUnsupported, fmt::format("{}: offsets of {} must be integers, not {}",
                                                     path, values_path, DTypeName(header.dtype)));
  }
  if (header.shape.size() != 1 || header.shape[0] < 1) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: offsets of {} must be one dimension of samples + 1 (at least "
                            "1), not shape ({})",
                            path, values_path, fmt::join(header.shape, ", ")));
  }
  // The header's size was checked against the file's: the count is real bytes.
  const int64_t count = header.shape[0];
  const size_t width = DTypeSize(header.dtype);
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  std::vector<std::byte> raw;
  for (int64_t first = 0; first < count; first += kSlice) {
    const int64_t n = std::min(kSlice, count - first);
    raw.resize(static_cast<size_t>(n) * width);
    ReadFully(file, header.data_offset + static_cast<uint64_t>(first) * width, raw.data(),
              raw.size(), "offsets");
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = first + k;
      const int64_t o = OffsetAt(raw.data() + static_cast<size_t>(k) * width, header.dtype);
      if (o < 0 || o > items) {
        throw Error(
            ErrorCode::kCorruptData,
            fmt::format("{}: offset {} (sample {}) is {}, outside the {} rows of {}", path, i,
                        std::max<int64_t>(0, std::min(i, count - 2)), o, items, values_path));
      }
      if (i > 0 && o < offsets[static_cast<size_t>(i - 1)]) {
        throw Error(ErrorCode::kCorruptData,
                    fmt::format("{}: offsets run backwards at sample {} ({} after {})", path, i - 1,
                                o, offsets[static_cast<size_t>(i - 1)]));
      }
      offsets[static_cast<size_t>(i)] = o;
    }
  }
  return offsets;
}

}  // namespace gpufeed
