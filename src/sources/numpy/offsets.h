// A NumPy variable-length field: `tokens.npy` holds every sample's items end to end along
// axis 0, and `tokens.offsets.npy` (1-D, any integer dtype) the samples + 1 offsets into that
// axis: sample i is rows [offsets[i], offsets[i+1]) of `tokens.npy`. The offsets are read
// once at open, checked, and kept as int64 in memory, so a file rewritten under an open source
// can never move a read outside the values. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/file.h"

namespace gpufeed {

// What names a field's offsets file: "tokens" + kOffsetsSuffix + ".npy".
inline constexpr std::string_view kOffsetsSuffix = ".offsets";

// The offsets `file` holds, as int64, checked: an integer dtype, one dimension, at least one
// offset, each within [0, items] (the values' rows; the first may be above 0) and none below
// the one before. Throws Error(kCorruptData) naming the file, the sample and the values' file
// `values_path` otherwise (Error(kUnsupported) for a dtype that is not an integer).
std::vector<int64_t> ReadNpyOffsets(const File& file, int64_t items,
                                    const std::string& values_path);

}  // namespace gpufeed
