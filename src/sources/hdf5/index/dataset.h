// One dataset of one HDF5 file as the hot path needs it: dtype and shape, where its bytes
// are (contiguous offset, or the chunk index: offset, size and filter mask per chunk), its
// filters and its fill value. Built once at open under the libhdf5 lock; read-only after.
//
// Thread-safety: an Hdf5Dataset is immutable after OpenHdf5Dataset returns; share it freely.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/schema.h"
#include "sources/hdf5/filters/filters.h"
#include "sources/hdf5/format/library.h"

namespace gpufeed {

enum class Hdf5Storage {
  kContiguous,  // unfiltered bytes at one file offset
  kChunked,     // chunks found through `chunks`
  kInMemory,    // compact (stored in the object header): read whole at open
  kFill,        // no storage allocated: every element is the fill value
  kLibrary,     // a filter or storage gpufeed cannot read itself: H5Dread under the lock
};

struct Hdf5ChunkEntry {
  uint64_t address = 0;
  uint64_t size = 0;  // stored bytes; 0 = never written (fill value)
  uint32_t filter_mask = 0;
};

// The chunk entries by row-major grid position: every position (dense) for a grid the file
// could index, or only the stored chunks (sparse) for a larger grid, a dataset whose chunks
// were mostly never written; a position not stored reads as the fill value either way.
//
// Thread-safety: immutable once filled; share it freely.
class Hdf5ChunkTable {
 public:
  // `stored`: (grid position, entry) of every stored chunk, sorted by position, no position
  // twice. REQUIRES: every position below `positions`.
  void Assign(uint64_t positions, std::vector<std::pair<uint64_t, Hdf5ChunkEntry>> stored,
              bool dense);
  // The entry at `linear` (size 0 when never written). REQUIRES: linear < positions().
  const Hdf5ChunkEntry& at(uint64_t linear) const;
  uint64_t positions() const { return positions_; }
  bool dense() const { return !dense_.empty() || positions_ == 0; }
  // Every stored chunk: (grid position, entry), by position.
  const std::vector<std::pair<uint64_t, Hdf5ChunkEntry>>& stored() const { return stored_; }

 private:
  uint64_t positions_ = 0;
  std::vector<Hdf5ChunkEntry> dense_;  // empty when sparse
  std::vector<std::pair<uint64_t, Hdf5ChunkEntry>> stored_;
};

// A variable-length dataset (h5py's vlen_dtype and string_dtype): each element is a reference
// (item count, global heap collection address, object index) to its items in a global heap
// collection (format/global_heap.h). The reference is what the layout stores and the chunks
// hold: Hdf5Dataset::field reads it as uint8[reference_bytes]; `field` is what users see.
struct Hdf5VlenType {
  FieldSpec field;          // `tokens: int32[*]`; a string is uint8[*] (its stored bytes)
  bool string = false;      // a variable-length string rather than a sequence
  bool big_endian = false;  // the items need a byte swap
  unsigned sizeof_addr = 8;
  unsigned sizeof_size = 8;
  uint64_t base_address = 0;  // the user block: heap addresses are relative to it
  size_t reference_bytes() const { return 4 + sizeof_addr + 4; }
};

struct Hdf5Dataset {
  std::string path;     // the file
  std::string dataset;  // as opened ("/train/mel")
  FieldSpec field;      // dtype and per-sample shape (name left to the caller)
  int64_t samples = 0;
  std::vector<int64_t> dims;  // full shape, samples first
  size_t element_size = 0;
  bool big_endian = false;  // elements need a byte swap after reading
  bool bitfield = false;    // a bitfield type (as bool: each byte must be 0 or 1)
  // Non-empty: the field is this member of compound dataset `dataset`, read through libhdf5
  // (element_size is the whole record's until the open ends, then the member's dtype's).
  std::string member;
  // Set for a variable-length dataset (its reference then is `field`, element_size bytes).
  std::optional<Hdf5VlenType> vlen;
  // kLibrary and kInMemory: H5Dread copies the elements in the file's own type, unconverted
  // (big_endian then still says whether they need a swap); else into the dtype's native type.
  bool copy_file_layout = false;
  // Why libhdf5 converts the elements ("3-bit precision at bit offset 0"), or "" when their
  // bytes are the dtype's standard layout (hdf5/dtype.h).
  std::string type_conversion;
  Hdf5Storage storage = Hdf5Storage::kContiguous;
  std::string layout_name;     // "contiguous", "chunked", "compact"
  std::string library_reason;  // kLibrary: why ("filter lzf")

  uint64_t contiguous_address = 0;
  std::vector<std::byte> in_memory;  // kInMemory: the whole dataset

  std::vector<int64_t> chunk_dims;  // kChunked (and kLibrary when chunked): per axis
  std::vector<int64_t> chunk_grid;  // chunks per axis
  std::vector<Hdf5Filter> filters;  // write order
  Hdf5ChunkTable chunks;            // by row-major grid position
  std::string index_method;         // how the chunk index was read, for inspect
  double index_seconds = 0;         // how long that took

  // kLibrary: the open dataset and the memory type H5Dread converts to (Hdf5MemoryType).
  std::shared_ptr<Hdf5Id> library_dataset;
  std::shared_ptr<Hdf5Id> library_memory_type;

  std::vector<std::byte> fill_value;  // one element, as stored (file byte order)
  uint64_t storage_bytes = 0;         // H5Dget_storage_size

  size_t ChunkBytes() const;  // decoded bytes of one full chunk
  bool filtered() const { return !filters.empty(); }
  int64_t ChunksPerSample() const;  // chunks one sample spans (1 when not chunked)
};

// Opens `file` with libhdf5 once gpufeed's own superblock checks passed (superblock.h).
// libhdf5 reads it through gpufeed's file driver (file_driver.h), so its bytes come from the
// File's file system, and the open file keeps `file` alive. Throws Error(kCorruptData) naming
// the file when either refuses it, the read's Error when a read fails. Takes the libhdf5 lock.
Hdf5Id OpenHdf5File(std::shared_ptr<const File> file);

// Opens `dataset` of the HDF5 file `file_id`, whose bytes the hot path reads through `file`.
// Throws Error naming the file and dataset: kNotFound, kUnsupported (dtype, rank 0),
// kCorruptData (index past the end of the file, damaged index). Takes the libhdf5 lock.
Hdf5Dataset OpenHdf5Dataset(hid_t file_id, const File& file, const std::string& dataset);

// Every dataset in the file, by path ("/a", "/g/b"), sorted. Datasets behind external links
// lie in other files and are not listed.
std::vector<std::string> ListHdf5Datasets(hid_t file_id);

// For a file that holds no datasets of its own: "" when it has no external links, else
// "its datasets lie behind external links: /a -> other.h5 (/data), ...; open those files".
// Takes the libhdf5 lock.
std::string DescribeHdf5ExternalLinks(hid_t file_id);

}  // namespace gpufeed
