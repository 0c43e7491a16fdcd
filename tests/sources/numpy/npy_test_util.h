// Helpers for the NumPy tests: raw `.npy` files with any header, and an Error catcher.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "error_code_of.h"
#include "gpufeed/error.h"

namespace gpufeed::testing {

// A `.npy` file of `version` (1, 2 or 3) whose header is `dict` (padded to 64 bytes and ended
// by '\n' as NumPy does) followed by `data`.
inline std::string RawNpy(int version, std::string dict, std::string_view data) {
  const size_t preamble = version == 1 ? 10 : 12;
  const size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(version));
  out.push_back('\0');
  const size_t len = dict.size();
  for (size_t i = 0; i < preamble - 8; ++i)
    out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += dict;
  out += data;
  return out;
}


}  // namespace gpufeed::testing
