// Undoing HDF5's filter pipeline on one raw chunk, in the worker that needs it: deflate
// (zlib), byte shuffle and fletcher32 (verified, then stripped), in any combination.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gpufeed {

// HDF5's filter ids (H5Zpublic.h) for the filters decoded here.
constexpr int kHdf5FilterDeflate = 1;
constexpr int kHdf5FilterShuffle = 2;
constexpr int kHdf5FilterFletcher32 = 3;

struct Hdf5Filter {
  int id = 0;
  std::string name;                 // as the file names it ("deflate", "lzf", ...)
  std::vector<unsigned> cd_values;  // client data (shuffle: element size; deflate: level)
};

// True for the filters DecodeHdf5Chunk handles.
bool IsDecodableHdf5Filter(int id);

// "gzip level 1 + shuffle"
std::string DescribeHdf5Filters(const std::vector<Hdf5Filter>& filters);

// Decodes `raw` (a chunk as stored) into `out`, which must receive exactly `out.size()`
// bytes. `filters` is the pipeline in write order (applied in reverse here); bit i of
// `filter_mask` skips filter i. `scratch` is reused between calls. Throws
// Error(kCorruptData) with the reason only ("corrupt deflate stream (zlib: invalid code
// lengths set)"); the caller names the file, dataset and chunk.
void DecodeHdf5Chunk(std::span<const std::byte> raw, const std::vector<Hdf5Filter>& filters,
                     uint32_t filter_mask, size_t element_size, std::span<std::byte> out,
                     std::vector<std::byte>& scratch);

// HDF5's Fletcher-32 (H5_checksum_fletcher32), exposed for tests.
uint32_t Hdf5Fletcher32(std::span<const std::byte> data);

}  // namespace gpufeed
