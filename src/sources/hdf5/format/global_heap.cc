#include "sources/hdf5/format/global_heap.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/metadata_bytes.h"

namespace gpufeed {
namespace {

// An object's header: index (2), reference count (2), reserved (4), size (sizeof_size).
size_t ObjectHeaderBytes(unsigned sizeof_size) { return 8 + sizeof_size; }

[[noreturn]] void Corrupt(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::kCorruptData, fmt::format("{}: {}", where, what));
}

}  // namespace

std::optional<Hdf5HeapObject> Hdf5GlobalHeap::Find(uint64_t index) const {
  const auto it = std::lower_bound(objects.begin(), objects.end(), index,
                                   [](const Hdf5HeapObject& o, uint64_t i) { return o.index < i; });
  if (it == objects.end() || it->index != index) return std::nullopt;
  return *it;
}

uint64_t ParseHdf5GlobalHeapSize(std::span<const uint8_t> header, unsigned sizeof_size,
                                 const std::string& where) {
  const Bytes b(header, &where);
  if (!b.Signature(0, "GCOL")) Corrupt(where, "no global heap collection signature (GCOL)");
  if (const uint64_t version = b.Uint(4, 1); version != 1) {
    Corrupt(where, fmt::format("global heap collection version {} (1 is the only one)", version));
  }
  const uint64_t size = b.Uint(8, sizeof_size);
  if (size < Hdf5GlobalHeapHeaderBytes(sizeof_size)) {
    Corrupt(where, fmt::format("a global heap collection of {} bytes is smaller than its "
                               "header ({} bytes)",
                               size, Hdf5GlobalHeapHeaderBytes(sizeof_size)));
  }
  return size;
}

Hdf5GlobalHeap ParseHdf5GlobalHeap(std::vector<uint8_t> bytes, unsigned sizeof_size,
                                   const std::string& where) {
  Hdf5GlobalHeap heap;
  heap.bytes = std::move(bytes);
  const Bytes b(heap.bytes, &where);
  const size_t header = Hdf5GlobalHeapHeaderBytes(sizeof_size);
  const uint64_t size =
      ParseHdf5GlobalHeapSize(b.span().first(std::min(b.size(), header)), sizeof_size, where);
  if (size != b.size()) {
    Corrupt(where,
            fmt::format("the collection says it holds {} bytes, {} were read", size, b.size()));
  }
  const size_t object_header = ObjectHeaderBytes(sizeof_size);
  uint64_t at = header;
  while (at < size) {
    if (size - at < object_header) break;  // too small for an object: free space
    const auto index = static_cast<uint16_t>(b.Uint(at, 2));
    const uint64_t object_size = b.Uint(at + 8, sizeof_size);
    // Object 0 is the free space, its size counting its header; the others are padded to 8.
    const auto padded = CheckedAdd(object_size, 7);
    const auto need = index == 0 ? std::optional<uint64_t>(object_size)
                      : padded   ? CheckedAdd(object_header, *padded & ~uint64_t{7})
                                 : std::nullopt;
    if (!need || *need > size - at || *need < object_header) {
      Corrupt(where, fmt::format("heap object {} at byte {} ({} bytes) does not fit the "
                                 "collection's {} bytes",
                                 index, at, object_size, size));
    }
    if (index != 0) {
      if (object_size > size - at - object_header) {
        Corrupt(where, fmt::format("heap object {} runs past the collection", index));
      }
      heap.objects.push_back({index, at + object_header, object_size});
    }
    at += *need;
  }
  std::sort(heap.objects.begin(), heap.objects.end(),
            [](const Hdf5HeapObject& x, const Hdf5HeapObject& y) { return x.index < y.index; });
  for (size_t i = 1; i < heap.objects.size(); ++i) {
    if (heap.objects[i].index == heap.objects[i - 1].index) {
      Corrupt(where, fmt::format("heap object {} is listed twice", heap.objects[i].index));
    }
  }
  return heap;
}

}  // namespace gpufeed
