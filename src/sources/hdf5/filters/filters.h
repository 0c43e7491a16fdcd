// Undoing HDF5's filter pipeline on one raw chunk, in the worker that needs it: deflate
// (libdeflate), byte shuffle, fletcher32 (verified, then stripped), and the filters h5py users
// add (LZF, Blosc, LZ4, Bitshuffle, Zstd: hdf5_codecs.h), in any combination.
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
// Registered third-party filters (the HDF Group's list) decoded here.
constexpr int kHdf5FilterLzf = 32000;
constexpr int kHdf5FilterBlosc = 32001;
constexpr int kHdf5FilterLz4 = 32004;
constexpr int kHdf5FilterBitshuffle = 32008;
constexpr int kHdf5FilterZstd = 32015;

struct Hdf5Filter {
  int id = 0;
  std::string name;                 // as the file names it ("deflate", "lzf", ...)
  std::vector<unsigned> cd_values;  // client data (shuffle: element size; deflate: level)
};

// True for the filters DecodeHdf5Chunk handles.
bool IsDecodableHdf5Filter(int id);

// "gzip level 1 + shuffle"
std::string DescribeHdf5Filters(const std::vector<Hdf5Filter>& filters);

// The registered name of filter `id` ("blosc", "zfp"), or "" when unknown.
std::string Hdf5FilterName(int id);
// Where a filter libhdf5 cannot load comes from: "Debian: hdf5-filter-plugin; pip:
// hdf5plugin", or general advice for an unknown id.
std::string Hdf5FilterProvider(int id);

// For a dataset read through libhdf5 (filters gpufeed does not decode): throws
// Error(kUnsupported) naming `what` (file and dataset), the filter's id and name and the
// package that provides it, when libhdf5 has no plugin for one of `filters` either.
// REQUIRES: the libhdf5 lock is held.
void RequireHdf5LibraryFilters(const std::vector<Hdf5Filter>& filters, const std::string& what);

// Decodes `raw` (a chunk as stored) into `out`, which must receive exactly `out.size()`
// bytes. `filters` is the pipeline in write order (applied in reverse here); bit i of
// `filter_mask` skips filter i. `scratch` is reused between calls. Every size a chunk declares
// is checked against out.size() before it is decoded. Throws Error(kCorruptData) with the
// reason only ("corrupt deflate stream (libdeflate: bad data)"); the caller names the file,
// dataset and chunk.
void DecodeHdf5Chunk(std::span<const std::byte> raw, const std::vector<Hdf5Filter>& filters,
                     uint32_t filter_mask, size_t element_size, std::span<std::byte> out,
                     std::vector<std::byte>& scratch);

// HDF5's Fletcher-32 (H5_checksum_fletcher32), exposed for tests.
uint32_t Hdf5Fletcher32(std::span<const std::byte> data);

}  // namespace gpufeed
