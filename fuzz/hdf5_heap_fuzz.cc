// libFuzzer target: an HDF5 global heap collection (the input, "GCOL" first), where
// variable-length data keeps its items (h5py's vlen sequences and strings), parsed with 8- and
// 4-byte lengths as the HDF5 reader parses one it read from a file, and every object it lists
// read through, as a sample's items are copied.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "sources/hdf5/format/global_heap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string where = "fuzz: the global heap collection";
  for (unsigned sizeof_size : {8u, 4u}) {
    try {
      const size_t header = gpufeed::Hdf5GlobalHeapHeaderBytes(sizeof_size);
      if (size < header) continue;
      const uint64_t claimed = gpufeed::ParseHdf5GlobalHeapSize(
          std::span<const uint8_t>(data, header), sizeof_size, where);
      // An exact-size heap copy of what the collection claims (at most the input): ASan sees
      // any read past its end. A claim past the input is the reader's "past the end of the file".
      if (claimed > size) continue;
      std::vector<uint8_t> bytes(data, data + claimed);
      const gpufeed::Hdf5GlobalHeap heap =
          gpufeed::ParseHdf5GlobalHeap(std::move(bytes), sizeof_size, where);
      volatile uint8_t sink = 0;
      for (const gpufeed::Hdf5HeapObject& o : heap.objects) {
        const auto found = heap.Find(o.index);
        if (!found || found->offset != o.offset) __builtin_trap();
        for (uint64_t i = 0; i < o.size; ++i) sink = sink ^ heap.bytes[o.offset + i];
      }
      (void)heap.Find(0);
      (void)heap.Find(65535);
    } catch (const gpufeed::Error&) {
      // Refused with a gpufeed error: what a damaged collection must get.
    }
  }
  return 0;
}
