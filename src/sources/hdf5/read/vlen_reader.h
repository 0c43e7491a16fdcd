// Reads a variable-length dataset (index/vlen.h): its references through the dataset's reader
// (contiguous or chunked, filtered or not: the reference is the element), and each sample's
// items from the global heap collection the reference names (format/global_heap.h), parsed
// once per worker and kept in that worker's Hdf5HeapCache.
//
// Every reference is untrusted: a collection outside the file, an object the collection lacks,
// an object whose size is not the item count times the item size, or an item count the file
// cannot hold is refused as Error(kCorruptData) naming the file, the dataset and the sample,
// before anything is allocated from it.
//
// Thread-safety: Hdf5VlenReader is immutable and thread-safe; each calling thread passes its
// own scratch and Hdf5HeapCache (one thread at a time each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "gpufeed/file.h"
#include "sources/hdf5/format/global_heap.h"
#include "sources/hdf5/read/dataset_reader.h"

namespace gpufeed {

// A worker's parsed collections, at most `max_bytes` of them, the oldest dropped first.
class Hdf5HeapCache {
 public:
  explicit Hdf5HeapCache(size_t max_bytes = size_t{32} << 20) : max_bytes_(max_bytes) {}
  std::shared_ptr<const Hdf5GlobalHeap> Find(const File* file, uint64_t address) const;
  // Keeps `heap` unless it alone is larger than the budget.
  void Insert(const File* file, uint64_t address, std::shared_ptr<const Hdf5GlobalHeap> heap);
  size_t bytes() const { return bytes_; }

 private:
  using Key = std::pair<const File*, uint64_t>;
  const size_t max_bytes_;
  size_t bytes_ = 0;
  std::map<Key, std::shared_ptr<const Hdf5GlobalHeap>> heaps_;
  std::deque<Key> order_;  // oldest first
};

// One element of a variable-length dataset.
struct Hdf5VlenReference {
  uint64_t length = 0;   // items; 0 for a null reference (address 0)
  uint64_t address = 0;  // of the collection, relative to the user block
  uint32_t object = 0;   // the object's index in the collection
};

class Hdf5VlenReader {
 public:
  // `references` reads the dataset's elements (its dataset().vlen is set); `file` holds them.
  Hdf5VlenReader(const Hdf5DatasetReader* references, const File* file);

  // The item counts of the samples of `indices` (in the whole source) that lie in this file,
  // which holds samples [first_sample, first_sample + samples), into `lengths` at the same
  // positions; the others are left alone. The references alone are read.
  // REQUIRES: lengths.size() == indices.size().
  void ReadLengths(std::span<const int64_t> indices, int64_t first_sample,
                   std::span<int64_t> lengths, Hdf5ReadScratch& scratch) const;
  // As ReadLengths, the whole references into `refs` (a batch's, read in one pass).
  void ReadReferences(std::span<const int64_t> indices, int64_t first_sample,
                      std::span<Hdf5VlenReference> refs, Hdf5ReadScratch& scratch) const;
  // The item count of sample `local`, and its reference.
  Hdf5VlenReference Reference(int64_t local, int64_t global, Hdf5ReadScratch& scratch) const;
  // Items [first, first + out.size() / item bytes) of the sample whose reference is `ref` into
  // `out`, in host byte order. REQUIRES: the range lies within ref.length.
  void ReadItems(const Hdf5VlenReference& ref, int64_t global, int64_t first,
                 std::span<std::byte> out, Hdf5HeapCache& heaps) const;

 private:
  Hdf5VlenReference Decode(const std::byte* element, int64_t global) const;
  std::shared_ptr<const Hdf5GlobalHeap> Collection(uint64_t address, int64_t global,
                                                   Hdf5HeapCache& heaps) const;
  std::string Sample(int64_t global) const;

  const Hdf5DatasetReader* const references_;
  const File* const file_;
  const Hdf5VlenType vlen_;
  const size_t item_bytes_;
};

}  // namespace gpufeed
