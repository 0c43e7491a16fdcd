// The pieces StackFields and the database sources share: element conversion to a field's
// dtype with the checks gpufeed/stack.h promises, and the interleave that puts K columns
// side by side in each row.
// Thread-safety: pure functions over the caller's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gpufeed/dtype.h"
#include "gpufeed/stack.h"

namespace gpufeed {

// Converts `count` elements of dtype `from` at `src` to dtype `to` at `dst` (may not
// overlap). Returns -1 when every element converted, else the index of the first refused
// one (elements before it are written). Same dtype: a copy.
int64_t ConvertElements(DType from, const std::byte* src, DType to, std::byte* dst, int64_t count);

// "3.4e+39 is beyond float32's range", "300 does not fit int8", "2.5 is not an integer":
// why the element at `src` (dtype `from`) does not convert to `to`.
std::string RefusalReason(DType from, const std::byte* src, DType to);

// Row r of `out` = row r of columns[0], row r of columns[1], ...: each column holds `rows`
// samples of `sample_bytes`.
void InterleaveColumns(std::span<const std::byte* const> columns, size_t sample_bytes, int64_t rows,
                       std::byte* out);

}  // namespace gpufeed
