// The HDF5 source: named datasets of one or more HDF5 files, samples along axis 0.
//
// Reads never take libhdf5's lock on the hot path: contiguous unfiltered datasets are read
// (pread, never a memory map: a file truncated under a running loader is an Error(kIo), not
// SIGBUS) at their file offset, chunked ones through a chunk index built once at open; raw chunks
// are read through the file seam and decoded in the calling worker (deflate through
// libdeflate, byte shuffle, fletcher32, and the filters h5py users add: LZF, Blosc with its
// codecs and shuffles, LZ4, Bitshuffle with LZ4 or Zstd, Zstd; no HDF5 plugin needed), each
// chunk once per batch, with a bounded decoded-chunk cache per worker. Datasets with any
// other filter (szip, scale-offset, n-bit, other plugins) fall back to H5Dread under the
// process-wide libhdf5 lock, with a one-line warning on stderr; when libhdf5 has no plugin
// for the filter either, opening fails naming the filter and the package that provides it.
// GPUFEED_HDF5_INFLATE=zlib inflates with zlib instead of libdeflate (for comparisons).
//
// Thread-safety: the returned Source is thread-safe (see source.h); Hdf5SourceCounters may be
// read while workers run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/source.h"

namespace gpufeed {

inline constexpr size_t kAutoChunkCache = ~size_t{0};

struct Hdf5Options {
  // Default: null = DefaultFileSystem() (local paths, s3:// and http(s):// URIs). Every byte
  // gpufeed and libhdf5 read goes through it.
  std::shared_ptr<const FileSystem> file_system;
  // Decoded chunks kept between batches, in bytes: one cache shared by all the workers of the
  // source (a chunk one worker decoded serves the others); 0 keeps none. A chunk larger than
  // the budget is still decoded once per batch, just not kept. Default: kAutoChunkCache =
  // sized from the data set and free RAM: the decoded size of the data set's chunks, within
  // 1/16 of the available RAM and [16 MiB, 1 GiB].
  size_t chunk_cache_bytes = kAutoChunkCache;
};

// Work counters of an HDF5 source, summed over its workers since it was opened.
struct Hdf5Counters {
  int64_t chunks_decoded = 0;    // filtered chunks read and decoded
  int64_t chunk_cache_hits = 0;  // chunk uses served by the decoded-chunk cache
  int64_t bytes_read = 0;        // bytes read from the files on the hot path
  int64_t library_reads = 0;     // samples read through H5Dread (unsupported filters)
  size_t chunk_cache_bytes = 0;  // the decoded-chunk budget in force (options resolved)
  // Chunk uses that found the chunk being fetched by another worker and waited for that fetch
  // instead of fetching it again (a remote object's whole chunks; counted as they happen).
  int64_t chunk_fetch_waits = 0;
};

// Opens `datasets` (paths inside the file, with groups: "mel", "/train/mel") of every file in
// `paths`, concatenated along axis 0 in the order given. Every file must hold every dataset
// with the same dtype and per-sample shape; within a file all datasets have the same length.
// An empty `datasets` takes every dataset of the first file (sorted by path). A field is named
// after its dataset path without the leading '/'.
// dtypes: bool (h5py's enum of int8), int8..int64, uint8..uint64, float16/32/64, either byte
// order. Throws Error naming the file and dataset: kNotFound (missing file or dataset),
// kUnsupported (compound, strings, references, ...), kCorruptData (truncated or damaged
// file, lengths that differ), kInvalidArgument (no paths, a dataset named twice).
std::shared_ptr<Source> OpenHdf5(std::vector<std::string> paths, std::vector<std::string> datasets,
                                 Hdf5Options options = {});

// The counters of a source OpenHdf5 returned. Throws Error(kInvalidArgument) for another one.
Hdf5Counters Hdf5SourceCounters(const Source& source);
// Whether `source` is one OpenHdf5 returned (a cache or transform in front of it is not).
bool IsHdf5Source(const Source& source);

// An HDF5 source's decoded-chunk cache: its budget in force, and the bytes of every chunk it
// could keep, decoded (the data set's filtered chunks; a remote object's unfiltered ones too).
struct Hdf5ChunkCacheSize {
  size_t budget = 0;
  uint64_t decoded_bytes = 0;  // saturates at 2^62
};
// Throw Error(kInvalidArgument) when `source` is not an HDF5 source (IsHdf5Source).
Hdf5ChunkCacheSize Hdf5ChunkCacheOf(const Source& source);
// Raises the decoded-chunk budget to `bytes` (never lowers it) while the source is read; what
// the doctor's remedies do (gpufeed/remedies.h). Returns the budget in force. Thread-safe.
size_t GrowHdf5ChunkCache(const Source& source, size_t bytes);

}  // namespace gpufeed
