// The compression filters h5py users add through hdf5plugin, decoded in the calling worker
// with Debian's libraries and no libhdf5 plugin or lock: Blosc (32001, libblosc, its byte
// and bit shuffles inside), LZ4 (32004, HDF5's block framing over liblz4), Bitshuffle (32008,
// the bit transpose here, its blocks LZ4- or Zstd-compressed), Zstd (32015, libzstd), LZF
// (32000, liblzf), and deflate (1, libdeflate; zlib on request, for comparisons).
//
// Each decoder writes into `out` and returns the bytes produced: exactly out.size() when
// `exact`, else at most out.size(). A size a chunk declares is checked against out.size()
// before anything is written; corrupt input is Error(kCorruptData) with the reason only.
//
// Thread-safety: thread-safe; each thread keeps its own decompression contexts.
#pragma once

#include <cstddef>
#include <span>

namespace gpufeed {

// Which inflater deflate chunks go through. libdeflate by default; GPUFEED_HDF5_INFLATE=zlib
// in the environment (read once) or SetHdf5InflateWithZlib(true) selects zlib, to measure
// one against the other on the same file.
void SetHdf5InflateWithZlib(bool zlib);
bool Hdf5InflateWithZlib();

size_t DecodeDeflate(std::span<const std::byte> in, std::span<std::byte> out, bool exact);
size_t DecodeLzf(std::span<const std::byte> in, std::span<std::byte> out, bool exact);
size_t DecodeBlosc(std::span<const std::byte> in, std::span<std::byte> out, bool exact);
size_t DecodeHdf5Lz4(std::span<const std::byte> in, std::span<std::byte> out, bool exact);
size_t DecodeZstd(std::span<const std::byte> in, std::span<std::byte> out, bool exact);
// `compression`: cd_values[4] of the filter (0 none, 2 LZ4, 3 Zstd); `block_elements`:
// cd_values[3] (0 = bitshuffle's default), used only without compression (compressed chunks
// carry their block size).
size_t DecodeBitshuffle(std::span<const std::byte> in, std::span<std::byte> out, bool exact,
                        size_t element_size, size_t block_elements, unsigned compression);

// Bitshuffle's transform and its inverse over `n` elements of `element_size` bytes, in blocks
// of `block` elements (a multiple of 8) with the remainder as bitshuffle leaves it. Exposed
// for tests and the test-file writer; `BitshuffleBlock` is the forward transform of one block.
void BitshuffleBlock(const std::byte* in, std::byte* out, size_t n, size_t element_size);
void BitunshuffleBlock(const std::byte* in, std::byte* out, size_t n, size_t element_size);

}  // namespace gpufeed
