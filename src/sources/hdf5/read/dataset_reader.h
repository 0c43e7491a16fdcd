// Reads samples of one dataset of one file into batch rows: the hot path of the HDF5 source.
//
// Contiguous data is read at its offset; chunked data chunk row by chunk row, each needed
// chunk read and decoded once per call and kept in the worker's decoded-chunk cache;
// unfiltered chunks are read per sample at the sample's offset inside the chunk, copied from
// the file's mapping where the file maps (h5py's chunks=True cuts a float32[1,64,32] sample
// into 256 pieces of 32 bytes: a pread each ran at about 800 samples/s on 2 threads, the
// mapping's copies at memory speed), by pread elsewhere; for an object in a store, a chunk a batch
// reads most of is fetched whole and kept in the chunk cache, so the next batches drawing from it
// (block shuffle) do not send its bytes again. Only datasets the file layout puts out of reach
// (kLibrary) take the libhdf5 lock. Reads are preads through the file seam, except contiguous data,
// which is copied from the file's mapping (a warm mapping gathers 2-5x faster than a pread per row:
// README, "Streaming at memory speed"); with GPUFEED_MAPPING_WARMER=1 only where a background
// warmer has touched it, and by pread elsewhere (core/warmed_mapping.h: a cold mapping is slower
// than pread on a VM). Either way a file truncated or rewritten while a loader reads it is
// Error(kIo) "changed size while being read" naming the file (mapping copies run under
// GuardMappedRead), never a SIGBUS.
//
// Thread-safety: Read is const and thread-safe; each calling thread passes its own scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/io/warmed_mapping.h"
#include "gpufeed/file.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/index/dataset.h"
#include "sources/hdf5/index/geometry.h"
#include "sources/hdf5/read/chunk_cache.h"

namespace gpufeed {

// A worker's buffers and counts, reused between batches.
struct Hdf5ReadScratch {
  explicit Hdf5ReadScratch(size_t cache_bytes) : cache(cache_bytes) {}
  explicit Hdf5ReadScratch(std::shared_ptr<SharedChunkCache> shared) : cache(std::move(shared)) {}
  DecodedChunkCache cache;
  std::vector<std::byte> raw;      // a stored chunk
  std::vector<std::byte> inflate;  // between two filters
  std::vector<std::byte> decoded;  // a decoded chunk the cache does not keep
  std::vector<std::byte> slab;     // one sample's piece of an unfiltered chunk
  // Stored chunks fetched with one ReadMany, and (grid position, offset in `fetched`) of each,
  // by position.
  std::vector<std::byte> fetched;
  std::vector<std::pair<size_t, size_t>> fetched_chunks;
  Hdf5Counters counters;  // since the owner last collected them
};

// One row to fill: sample `local` of this dataset (`global` in the whole source, for error
// messages) goes to `dst` (the field's SampleBytes()).
struct Hdf5RowTarget {
  int64_t local = 0;
  int64_t global = 0;
  std::byte* dst = nullptr;
};

// One field's unfiltered chunk pieces for a batch, planned before any is read, so that a
// source sends the pieces of every field of a file with one ReadMany (a remote file then has
// all of them in flight at once, not one field's after another's).
struct Hdf5PiecePlan {
  std::vector<Hdf5RowTarget> rows;
  std::vector<ReadRange> ranges;
  std::vector<std::byte> slab;  // pieces of several runs, copied to their rows at the end
  struct Split {
    size_t row, col, slab_at;
  };
  std::vector<Split> split;
  struct Whole {                     // a stored chunk read whole, kept in the chunk cache once read
    size_t linear, first, end, col;  // rows [first, end) of `rows` read from it
    std::shared_ptr<ChunkBytes> bytes;
    ChunkFetch fetch;  // this worker's claim: the others wanting the chunk wait for it
  };
  std::vector<Whole> whole;
  struct Awaited {  // a stored chunk another worker is fetching: copied from once it arrives
    size_t linear, first, end, col;
    std::shared_future<std::shared_ptr<const ChunkBytes>> chunk;  // null: that fetch failed
  };
  std::vector<Awaited> awaited;
  uint64_t bytes = 0;
};

// Whole chunks a later batch will read, claimed for one ReadMany (Hdf5DatasetReader::ClaimAhead):
// once read, each goes to the chunk cache and to the workers waiting for it; dropped unread,
// its claims are abandoned.
struct Hdf5ReadAhead {
  std::vector<ReadRange> ranges;
  std::vector<std::shared_ptr<ChunkBytes>> buffers;  // by range
  std::vector<ChunkFetch> fetches;                   // by range
  uint64_t bytes = 0;
};

class Hdf5DatasetReader {
 public:
  // `cache_tag` distinguishes this reader's chunks in a shared DecodedChunkCache.
  Hdf5DatasetReader(Hdf5Dataset dataset, const File* file, uint32_t cache_tag);

  const Hdf5Dataset& dataset() const { return ds_; }
  const Hdf5ChunkGeometry& geometry() const { return geometry_; }

  // REQUIRES: rows sorted by `local`, every local in [0, samples).
  void Read(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;

  // Whether Read's reads are unfiltered chunk pieces of a file that does not map, which
  // PlanPieces can plan.
  bool PlansPieces() const { return plans_pieces_; }
  // Whether Read keeps unfiltered chunks it read whole in the chunk cache (a remote object).
  bool KeepsChunks() const { return keeps_chunks_; }
  // Fills plan with the ranges Read would send for `rows` (fill values, and the pieces of
  // chunks the cache holds, are written now). REQUIRES: PlansPieces(), rows as for Read.
  void PlanPieces(std::span<const Hdf5RowTarget> rows, Hdf5PiecePlan& plan,
                  Hdf5ReadScratch& scratch) const;
  // After the plan's ranges were read: the pieces copied to their rows, and the chunks this
  // worker fetched whole handed to the cache and to the workers waiting for them. A source
  // places every plan of a batch before it finishes any, since FinishPieces may wait for
  // other workers' fetches (chunk_cache.h: a worker waits only once its own are finished).
  void PlacePieces(Hdf5PiecePlan& plan, Hdf5ReadScratch& scratch) const;
  // After PlacePieces: the rows of chunks other workers fetched copied once they arrive (read
  // here when their fetch failed), then the rest of Read (byte order, checks).
  void FinishPieces(Hdf5PiecePlan& plan, Hdf5ReadScratch& scratch) const;
  // Claims the whole chunks `rows` (a later batch's; dst unused) will read that no worker holds
  // or fetches, into `ahead`, while its bytes stay within `max_bytes`.
  // REQUIRES: KeepsChunks(), rows sorted by `local`.
  void ClaimAhead(std::span<const Hdf5RowTarget> rows, DecodedChunkCache& cache, uint64_t max_bytes,
                  Hdf5ReadAhead& ahead) const;
  // When the plan's ranges were not read: its claims abandoned (the workers waiting for them
  // read the chunks themselves) and its waits dropped.
  static void DropPieces(Hdf5PiecePlan& plan);

 private:
  void ReadContiguous(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;
  // The rows the mapping does not serve: runs of neighbouring samples, one ReadMany.
  void ReadContiguousRuns(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;
  // One run read alone, its error naming the run's first sample.
  void ReadContiguousRun(std::span<const Hdf5RowTarget> run, Hdf5ReadScratch& scratch) const;
  void ReadChunked(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;
  // Unfiltered chunks of a mapped file: every piece copied out of the mapping.
  void ReadChunkedMapped(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;
  void ReadLibrary(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;
  // Refuses a byte other than 0 or 1 in rows read as bool from an 8-bit bitfield.
  void CheckBools(std::span<const Hdf5RowTarget> rows) const;
  // The decoded chunk at grid position `linear`: from the cache or decoded now.
  const std::byte* DecodedChunk(size_t linear, const Hdf5RowTarget& first, Hdf5ReadScratch& scratch,
                                DecodedChunkCache::Buffer& hold) const;
  // Unfiltered chunks of a file that does not map: every sample's pieces with one ReadMany.
  // False when it failed (nothing is then known of the rows: read them again).
  bool ReadChunkedPieces(std::span<const Hdf5RowTarget> rows, Hdf5ReadScratch& scratch) const;
  // Whether the stored chunk `linear`, which `rows` (of one chunk row) read from, is fetched
  // whole and kept rather than read piece by piece.
  bool ReadsChunkWhole(std::span<const Hdf5RowTarget> rows, size_t linear,
                       const DecodedChunkCache& cache) const;
  // The pieces of `rows` in column `col` copied out of that chunk's bytes.
  void CopyChunkRows(const std::byte* chunk, std::span<const Hdf5RowTarget> rows, size_t col) const;
  // Each of `rows`' pieces of stored chunk `linear` (column `col`) read alone, an error naming
  // the chunk and the sample.
  void ReadPiecesAlone(std::span<const Hdf5RowTarget> rows, size_t linear, size_t col,
                       Hdf5ReadScratch& scratch) const;
  // The plan's awaited chunks copied to their rows once their fetches end.
  void AwaitPieces(Hdf5PiecePlan& plan, Hdf5ReadScratch& scratch) const;
  // Fetches the stored chunks the cache lacks for the chunk rows of rows[k..], with one
  // ReadMany (a remote file has them all in flight at once), up to kMaxFetchBytes; returns
  // the row after the last chunk row fetched. A failed fetch leaves none fetched: each chunk
  // is then read alone, and its error names it.
  size_t FetchChunks(std::span<const Hdf5RowTarget> rows, size_t k, Hdf5ReadScratch& scratch) const;
  // The raw bytes FetchChunks fetched for chunk `linear`, or empty.
  std::span<const std::byte> FetchedChunk(size_t linear, Hdf5ReadScratch& scratch) const;
  void Fill(std::byte* dst, size_t bytes) const;
  // The key of stored chunk `linear` in the shared chunk cache: the reader's tag above it.
  uint64_t CacheKey(size_t linear) const { return (uint64_t{cache_tag_} << 40) | linear; }
  // The end of the rows from `k` on in rows[k]'s chunk row (rows sorted by `local`).
  size_t ChunkRowEnd(std::span<const Hdf5RowTarget> rows, size_t k) const;
  // What Read does to the rows once their bytes are in: byte order, bool checks.
  void FinishRows(std::span<const Hdf5RowTarget> rows) const;
  // Reads `n` bytes at `offset`, which open checked to lie inside the file. Throws
  // Error(kIo) "changed size while being read" when the file now ends first.
  void ReadBytes(uint64_t offset, void* dst, size_t n, Hdf5ReadScratch& scratch) const;
  std::string ChunkName(size_t linear) const;

  const Hdf5Dataset ds_;
  const File* const file_;
  const uint32_t cache_tag_;
  const size_t sample_bytes_;
  Hdf5ChunkGeometry geometry_;
  bool zero_fill_ = true;
  bool fetch_chunks_ = false;  // filtered chunks of a file that does not map: FetchChunks
  bool plans_pieces_ = false;  // unfiltered chunks of a file that does not map
  // ... of an object in a store, where a request costs a round trip: a chunk a batch reads
  // most of is read whole and kept. Not a disk-cached copy, where a read costs no round trip
  // and whole chunks only add bytes to copy (its second epoch ran at half the rate).
  bool keeps_chunks_ = false;
  // Contiguous data in a mappable file: the mapping and how far it is warm; else null.
  std::unique_ptr<WarmedMapping> warm_;
  // Unfiltered chunked data in a mappable file: the file's mapping (every stored chunk's range
  // was checked against the file's size at open); else null.
  const std::byte* chunk_map_ = nullptr;
};

}  // namespace gpufeed
