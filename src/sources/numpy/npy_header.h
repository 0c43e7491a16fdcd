// The `.npy` header: parsing it strictly and writing it the way NumPy does.
//
// Format (numpy.lib.format): the magic "\x93NUMPY", a major and minor version byte, the header
// length (uint16 little-endian in 1.0, uint32 in 2.0 and 3.0), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with spaces and ended by
// '\n'. The data follow in C order. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dtype.h"
#include "gpufeed/file.h"

namespace gpufeed {

struct NpyHeader {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // the whole array's shape, axis 0 first
  uint64_t data_offset = 0;    // where the data start in the file
};

// Reads and checks the header of `file`: magic, version 1.0/2.0/3.0, the dict with exactly the
// keys 'descr', 'fortran_order' and 'shape', a supported little-endian dtype, C order, at least
// one dimension, and a data size equal to shape * itemsize. Throws Error(kCorruptData) for a
// malformed or truncated file and Error(kUnsupported) for a valid array gpufeed cannot read,
// each naming the file.
NpyHeader ReadNpyHeader(const File& file);

// Parses the dict literal alone (the header text after the length field). `path` is for
// messages. Checks dtype and order but not sizes.
NpyHeader ParseNpyDict(std::string_view dict, const std::string& path);

// The dtype's NumPy descr ("<f4", "|u1"). Throws Error(kUnsupported) for bfloat16, which NumPy
// does not have.
std::string NpyDescr(DType dtype);

// The complete version 1.0 header (magic through '\n') for an array of `dtype` and `shape`,
// padded so the data start at a multiple of 64 bytes, as NumPy writes it.
std::string FormatNpyHeader(DType dtype, const std::vector<int64_t>& shape);

}  // namespace gpufeed
