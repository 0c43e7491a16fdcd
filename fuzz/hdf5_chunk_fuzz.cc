// Fuzzes the HDF5 chunk decoders (hdf5_filters.h, hdf5_codecs.h): a chunk as stored, under
// one of the filter chains gpufeed decodes, into a chunk of a size the input names. Any
// input must decode or throw Error(kCorruptData / kUnsupported), never crash, read out of
// bounds or write past the chunk.
//
// Input: byte 0 picks the chain, bytes 1-2 the decoded size (little-endian, at most 64 KiB),
// byte 3 the element size (1..16), the rest is the stored chunk.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpufeed/error.h"
#include "sources/hdf5/filters/filters.h"

namespace {

std::vector<gpufeed::Hdf5Filter> Chain(uint8_t pick, unsigned element_size) {
  using gpufeed::Hdf5Filter;
  switch (pick % 10) {
    case 0:
      return {{gpufeed::kHdf5FilterShuffle, "", {element_size}},
              {gpufeed::kHdf5FilterDeflate, "", {1}}};
    case 1:
      return {{gpufeed::kHdf5FilterLzf, "", {}}};
    case 2:
      return {{gpufeed::kHdf5FilterBlosc, "", {2, 2, element_size, 0, 5, 1, 1}}};
    case 3:
      return {{gpufeed::kHdf5FilterLz4, "", {}}};
    case 4:
      return {{gpufeed::kHdf5FilterZstd, "", {3}}};
    case 5:
      return {{gpufeed::kHdf5FilterBitshuffle, "", {0, 3, element_size, 0, 2}}};
    case 6:
      return {{gpufeed::kHdf5FilterBitshuffle, "", {0, 3, element_size, 0, 3}}};
    case 7:
      return {{gpufeed::kHdf5FilterBitshuffle, "", {0, 3, element_size, 0, 0}}};
    case 8:  // a checksum, then a compressor
      return {{gpufeed::kHdf5FilterLz4, "", {}}, {gpufeed::kHdf5FilterFletcher32, "", {}}};
    default:  // two compressors stacked: the inner one's size is only bounded
      return {{gpufeed::kHdf5FilterZstd, "", {}}, {gpufeed::kHdf5FilterDeflate, "", {}}};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const unsigned element_size = 1 + data[3] % 16;
  const size_t out_bytes = size_t{data[1]} | size_t{data[2]} << 8;
  const auto chain = Chain(data[0], element_size);
  // Exactly the chunk's size, so ASan sees any write past it.
  std::vector<std::byte> out(out_bytes);
  std::vector<std::byte> scratch;
  const std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data + 4), size - 4);
  try {
    gpufeed::DecodeHdf5Chunk(raw, chain, 0, element_size, out, scratch);
  } catch (const gpufeed::Error& e) {
    if (e.code() != gpufeed::ErrorCode::kCorruptData &&
        e.code() != gpufeed::ErrorCode::kUnsupported) {
      __builtin_trap();
    }
  }
  return 0;
}
