// GatherRows: the host's row gather, dst row i = src row rows[i], for every source whose
// samples lie in memory as one array per field (memory, database tables, the RAM and shm
// caches, the host device's gather).
// Thread-safety: a pure function over the caller's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace gpufeed {

// REQUIRES: every rows[i] indexes a row of `src`; dst holds rows.size() rows of row_bytes.
inline void GatherRows(const std::byte* src, size_t row_bytes, std::span<const int64_t> rows,
                       std::byte* dst) {
  for (const int64_t row : rows) {
    std::memcpy(dst, src + static_cast<size_t>(row) * row_bytes, row_bytes);
    dst += row_bytes;
  }
}

}  // namespace gpufeed
