#include "sources/db/postgres_copy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <new>
#include <span>
#include <stdexcept>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr char kSignature[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};

int16_t ReadInt16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return static_cast<int16_t>(__builtin_bswap16(v));
}
int32_t ReadInt32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return static_cast<int32_t>(__builtin_bswap32(v));
}

// One big-endian element of `size` bytes into host order at `out`.
void StoreElement(const char* p, size_t size, std::byte* out) {
  switch (size) {
    case 1:
      std::memcpy(out, p, 1);
      break;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      v = __builtin_bswap16(v);
      std::memcpy(out, &v, 2);
      break;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      v = __builtin_bswap32(v);
      std::memcpy(out, &v, 4);
      break;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      v = __builtin_bswap64(v);
      std::memcpy(out, &v, 8);
      break;
    }
  }
}

std::string ShapeText(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

}  // namespace

std::optional<DType> PgTypeToDType(uint32_t oid, bool* is_array, uint32_t* element_oid) {
  // Oids from pg_type.dat; stable across PostgreSQL versions.
  struct Mapping {
    uint32_t scalar, array;
    DType dtype;
  };
  static constexpr Mapping kMappings[] = {
      {16, 1000, DType::kBool},  {21, 1005, DType::kInt16},    {23, 1007, DType::kInt32},
      {20, 1016, DType::kInt64}, {700, 1021, DType::kFloat32}, {701, 1022, DType::kFloat64},
  };
  for (const auto& m : kMappings) {
    if (oid == m.scalar || oid == m.array) {
      *is_array = oid == m.array;
      *element_oid = *is_array ? m.scalar : 0;
      return m.dtype;
    }
  }
  return std::nullopt;
}

PgCopyParser::PgCopyParser(const std::vector<PgColumn>& columns, std::string context,
                           std::string row_suffix)
    : columns_(columns), context_(std::move(context)), row_suffix_(std::move(row_suffix)) {
  for (const auto& c : columns_) {
    FieldSpec spec{c.name, c.dtype, {}};
    if (c.declared_shape) spec.shape = *c.declared_shape;
    table_.fields.push_back(spec);
    table_.data.emplace_back();
    shape_known_.push_back(!c.is_array || c.declared_shape.has_value());
    dims_.emplace_back();
  }
}

void PgCopyParser::Fail(size_t column, const std::string& what) const {
  throw Error(ErrorCode::kCorruptData,
              fmt::format("{}: row {}{}, column '{}' ({}): {}", context_, table_.rows, row_suffix_,
                          columns_[column].name, columns_[column].type_name, what));
}

void PgCopyParser::Feed(const char* data, size_t size) {
  // Sizes are checked before allocating, so what still fails to allocate is a result too large
  // for this machine's memory: a gpufeed error naming the query, never a bare std exception.
  try {
    if (pending_.empty()) {
      const size_t used = Parse(data, size);
      pending_.assign(data + used, size - used);
    } else {
      pending_.append(data, size);
      const size_t used = Parse(pending_.data(), pending_.size());
      pending_.erase(0, used);
    }
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kIo, fmt::format("{}: out of memory after {} rows{}", context_,
                                            table_.rows, row_suffix_));
  } catch (const std::length_error&) {
    throw Error(ErrorCode::kIo, fmt::format("{}: out of memory after {} rows{}", context_,
                                            table_.rows, row_suffix_));
  }
}

size_t PgCopyParser::Parse(const char* data, size_t size) {
  size_t at = 0;
  if (!header_done_) {
    if (size < sizeof(kSignature) + 8) return 0;
    if (std::memcmp(data, kSignature, sizeof(kSignature)) != 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the server's COPY output lacks the binary signature", context_));
    }
    const int32_t extension = ReadInt32(data + sizeof(kSignature) + 4);
    if (extension < 0) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: bad COPY header extension length {}", context_, extension));
    }
    const size_t header = sizeof(kSignature) + 8 + static_cast<size_t>(extension);
    if (size < header) return 0;
    at = header;
    header_done_ = true;
  }
  while (at + 2 <= size) {
    if (ended_) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: data after the end of the COPY output", context_));
    }
    const int16_t count = ReadInt16(data + at);
    if (count == -1) {
      ended_ = true;
      at += 2;
      continue;
    }
    if (count != static_cast<int16_t>(columns_.size())) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: row {}{} has {} fields, expected {}", context_, table_.rows,
                              row_suffix_, count, columns_.size()));
    }
    // Find the tuple's end before decoding, so a tuple split across messages waits whole.
    size_t end = at + 2;
    bool complete = true;
    for (int16_t f = 0; f < count; ++f) {
      if (end + 4 > size) {
        complete = false;
        break;
      }
      const int32_t length = ReadInt32(data + end);
      end += 4;
      if (length > 0) end += static_cast<size_t>(length);
      if (end > size) {
        complete = false;
        break;
      }
    }
    if (!complete) break;
    DecodeTuple(data + at + 2, data + end);
    at = end;
  }
  return at;
}

void PgCopyParser::DecodeTuple(const char* p, const char* end) {
  for (size_t c = 0; c < columns_.size(); ++c) {
    const int32_t length = ReadInt32(p);
    p += 4;
    if (length < 0) {
      Fail(c, fmt::format("NULL; every row needs a value (filter with WHERE {} IS NOT NULL or "
                          "replace it with COALESCE)",
                          columns_[c].name));
    }
    const PgColumn& column = columns_[c];
    if (column.is_array) {
      DecodeArray(c, p, length);
    } else {
      const size_t size = DTypeSize(column.dtype);
      if (static_cast<size_t>(length) != size) {
        Fail(c, fmt::format("a value of {} bytes, expected {}", length, size));
      }
      auto& out = table_.data[c];
      out.resize(out.size() + size);
      StoreElement(p, size, out.data() + out.size() - size);
    }
    p += length;
  }
  GPUFEED_ASSERT(p == end, "tuple length mismatch after a checked scan");
  ++table_.rows;
}

void PgCopyParser::DecodeArray(size_t c, const char* p, int32_t length) {
  const PgColumn& column = columns_[c];
  const char* end = p + length;
  if (length < 12) Fail(c, "a truncated array header");
  const int32_t ndim = ReadInt32(p);
  const uint32_t element = static_cast<uint32_t>(ReadInt32(p + 8));
  p += 12;
  if (ndim < 0 || ndim > 6 || end - p < static_cast<ptrdiff_t>(ndim) * 8) {
    Fail(c, fmt::format("a malformed array header ({} dimensions)", ndim));
  }
  if (element != column.element_oid) {
    Fail(c, fmt::format("array elements of type oid {}, expected {}", element, column.element_oid));
  }
  // The dimensions are untrusted: each must be >= 0, their product must not overflow, and
  // the bytes left in the value must hold that many elements (each needs its int32 length
  // word at least, so the output grows by at most twice the value's bytes) before anything is
  // allocated: 73 bytes must not ask for 64 GiB. A NULL element is a length word alone; the
  // loop below names it.
  std::vector<int64_t> dims(static_cast<size_t>(ndim));
  for (int32_t d = 0; d < ndim; ++d) {
    dims[d] = ReadInt32(p);
    p += 8;  // the lower bound does not change the layout
    if (dims[d] < 0) Fail(c, fmt::format("an array with a negative dimension {}", dims[d]));
  }
  const size_t size = DTypeSize(column.dtype);
  uint64_t elements = 0;
  if (ndim > 0) {
    const auto product = CheckedProduct(
        std::span<const uint64_t>(reinterpret_cast<const uint64_t*>(dims.data()), dims.size()));
    if (!product) Fail(c, fmt::format("an array of shape {}: too many elements", ShapeText(dims)));
    elements = *product;
  }
  const auto need = CheckedMul(elements, 4);
  if (!need || *need > static_cast<uint64_t>(end - p)) {
    Fail(c, fmt::format("an array of shape {} in {} bytes: truncated", ShapeText(dims), length));
  }
  if (ndim == 0) dims = {0};  // an empty array: zero elements
  FieldSpec& spec = table_.fields[c];
  if (!shape_known_[c]) {
    spec.shape = dims;
    dims_[c] = dims;
    shape_known_[c] = true;
  } else if (column.declared_shape) {
    const auto declared = static_cast<uint64_t>(spec.ElementsPerSample());
    if (elements != declared) {
      Fail(c, fmt::format("an array of shape {} ({} elements); the declared shape {} needs {}",
                          ShapeText(dims), elements, ShapeText(spec.shape), declared));
    }
  } else if (dims != dims_[c]) {
    Fail(c, fmt::format("a ragged array: shape {} where the first row has {}; every row needs "
                        "the same shape",
                        ShapeText(dims), ShapeText(dims_[c])));
  }
  auto& out = table_.data[c];
  const size_t base = out.size();
  out.resize(base + static_cast<size_t>(elements) * size);
  for (uint64_t i = 0; i < elements; ++i) {
    if (end - p < 4) Fail(c, "a truncated array");
    const int32_t n = ReadInt32(p);
    p += 4;
    if (n < 0) {
      Fail(c, fmt::format("a NULL at element {} of the array; every element needs a value", i));
    }
    if (static_cast<size_t>(n) != size || end - p < n) {
      Fail(c, fmt::format("an array element of {} bytes, expected {}", n, size));
    }
    StoreElement(p, size, out.data() + base + static_cast<size_t>(i) * size);
    p += n;
  }
  if (p != end) Fail(c, "trailing bytes after the array");
}

void PgCopyParser::Finish() const {
  if (!ended_ || !pending_.empty()) {
    throw Error(ErrorCode::kIo, fmt::format("{}: the COPY output ended early after {} rows{}",
                                            context_, table_.rows, row_suffix_));
  }
}

ColumnTable PgCopyParser::Take() {
  // A column whose shape no row set (no rows) keeps an empty shape; callers reject empty
  // tables anyway.
  return std::move(table_);
}

}  // namespace gpufeed
