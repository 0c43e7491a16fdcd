// Source: where samples come from (NumPy, HDF5, SQLite, PostgreSQL, memory, synthetic).
//
// Thread-safety: a Source is thread-safe. Many loader workers call Read at once, each with
// its own SourceWorkerState; a source never holds a global lock on the hot path. A source
// sorts a batch's indices for locality and scatters rows back into the order asked.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/schema.h"

namespace gpufeed {

// Where a data set is kept (gpufeed/cache.h): kAuto asks OpenCached to choose; a source
// reports kNone, kRam, kShm or kDevice (cache_tier()). kDisk keeps the bytes of remote data
// on the node's disk below every source the process opens (the file system's, not a copy a
// source holds), so no source reports it. Spelled as text (kCacheTiers) only where a person
// types or reads it: the CLI, Python, messages.
enum class CacheTier { kAuto, kNone, kRam, kShm, kDevice, kDisk };

// Every tier with its name, in the order messages list them: the one list of tiers, which
// the CLI's options, the Python package (gpufeed's cache_tiers) and every message take.
struct CacheTierSpelling {
  CacheTier tier;
  std::string_view name;
};
inline constexpr std::array<CacheTierSpelling, 6> kCacheTiers = {{{CacheTier::kAuto, "auto"},
                                                                  {CacheTier::kNone, "none"},
                                                                  {CacheTier::kRam, "ram"},
                                                                  {CacheTier::kShm, "shm"},
                                                                  {CacheTier::kDevice, "device"},
                                                                  {CacheTier::kDisk, "disk"}}};

// "auto", "none", "ram", "shm", "device", "disk".
inline std::string_view CacheTierName(CacheTier tier) {
  for (const CacheTierSpelling& t : kCacheTiers) {
    if (t.tier == tier) return t.name;
  }
  return "none";
}
// The names, as messages list them: "auto, none, ram, shm, device, disk".
inline std::string CacheTierNames() {
  std::string names;
  for (const CacheTierSpelling& t : kCacheTiers) {
    if (!names.empty()) names += ", ";
    names += t.name;
  }
  return names;
}
// The tier named `text`. Throws Error(kInvalidArgument) listing the names for anything else.
inline CacheTier ParseCacheTier(std::string_view text) {
  for (const CacheTierSpelling& t : kCacheTiers) {
    if (text == t.name) return t.tier;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "cache tier '" + std::string(text) + "' is not one of " + CacheTierNames());
}

// What a source reports of itself while a loader reads it (Source::Stats; the loader's
// LoaderStats::source). A plain value type.
struct SourceStats {
  CacheTier cache_tier = CacheTier::kNone;  // the tier serving the reads now (cache_tier())
  // A copy made while the source is read (a cache filled in the background, the remedies'
  // copy): the share of it made, 0 to 1 (1 once the copy serves); -1 when none was started.
  double cache_built_fraction = -1;
  // Chunked data decoded in the workers (HDF5), since the source was opened: chunks read and
  // decoded, chunk uses the decoded-chunk cache served, and that cache's budget in bytes; -1
  // for a source that decodes no chunks.
  int64_t chunks_decoded = -1;
  int64_t chunk_cache_hits = -1;
  int64_t chunk_cache_bytes = -1;
  // Rows made of a variable-length field, padded or packed (gpufeed/varlen.h), over one epoch:
  // the field's items the rows hold, the padding items, and the items cut from samples longer
  // than a row; -1 for other sources.
  int64_t varlen_items = -1;
  int64_t varlen_pad_items = -1;
  int64_t varlen_truncated_items = -1;
};

// Where a batch's rows go: one pointer per field of the source's schema (same order), each
// to `rows` contiguous samples of that field's SampleBytes(). A variable-length field's
// pointer is null: Read leaves it alone (Source::ReadItems serves it).
struct BatchView {
  std::vector<std::byte*> fields = {};
  int64_t rows = 0;
};

class Device;

// A data set already in a device's memory (the device cache tier): sample i of field f is
// the SampleBytes() of that field at fields[f] + i * SampleBytes(). A loader on `device`
// gathers its batches from there on the device's stream instead of calling Read.
struct DeviceResidentRows {
  std::shared_ptr<Device> device;
  std::vector<const std::byte*> fields;  // one per field of the source's schema
};

// Per-worker scratch a source keeps between batches (decoded-chunk caches, buffers).
// Used by one worker thread at a time.
class SourceWorkerState {
 public:
  virtual ~SourceWorkerState() = default;
};

// How a source stores its samples, for the loader's advice on shuffling (Source::chunking).
struct SourceChunking {
  int64_t samples_per_chunk = 1;    // samples stored together (PreferredBlock)
  bool compressed = false;          // a chunk is decoded whole to read any sample of it
  int64_t decoded_chunk_bytes = 0;  // one chunk row of every compressed field, decoded
  int64_t cache_bytes = 0;          // decoded chunks the workers keep between batches, in all
  // The most chunks one sample of a field spans (h5py's chunks=True cuts a float32[1,64,32]
  // sample into 256), that field's name and its chunk shape: 1 when samples are whole.
  int64_t pieces_per_sample = 1;
  std::string pieces_field;
  std::vector<int64_t> pieces_chunk_shape;
};

class Source;
// Error(kUnsupported): `source` has no variable-length field number `field` to read.
[[noreturn]] void ThrowNoVariableField(const Source& source, int field);

class Source {
 public:
  virtual ~Source() = default;

  virtual const Schema& schema() const = 0;
  // Number of samples.
  virtual int64_t size() const = 0;
  // A short description for logs: "numpy:/data/train (2 fields, 100000 samples)".
  virtual std::string Describe() const = 0;
  // What identifies the data for a cache key: paths, sizes, modification times, fields.
  virtual std::string Identity() const = 0;
  // Samples stored together (an HDF5 chunk along axis 0); 1 when any order reads alike.
  // Block shuffle uses it.
  virtual int64_t PreferredBlock() const { return 1; }
  // Default: samples stored alone, nothing to decode.
  virtual SourceChunking chunking() const { return {}; }

  virtual std::unique_ptr<SourceWorkerState> NewWorkerState() const { return nullptr; }

  // Default: null = the samples are only reachable through Read. Non-null: they also lie in
  // a device's memory, where a loader on that device gathers them (Read still works).
  virtual const DeviceResidentRows* device_rows() const { return nullptr; }

  // The cache tier serving this source: "none", or "ram", "shm", "device" for the caches'
  // sources (the doctor's advice depends on it).
  virtual CacheTier cache_tier() const { return CacheTier::kNone; }
  // What the source reports of itself (LoaderStats::source). Default: its cache tier. A source
  // in front of another (a cache that fills while it is read) adds the other's counters.
  virtual SourceStats Stats() const { return {.cache_tier = cache_tier()}; }
  // Default: true. False when Identity() means nothing in another process (arrays in this
  // process's memory, known by their addresses): such a source is never cached in shared
  // memory, where another process would take the key for its own data.
  virtual bool shareable_across_processes() const { return true; }
  // Default: true. False when a sample's bytes differ from read to read (an image source's
  // random crop, drawn per epoch through ReadSeeded): a copy of the rows would freeze one
  // draw, so no cache tier copies such a source (it caches what repeats itself, as the image
  // sources cache their decoded images).
  virtual bool rows_repeat() const { return true; }
  // Default: true. False when a copy of the rows would read no faster than the source does:
  // arrays already in this process's memory, or rows computed from another source's items
  // (padded or packed, gpufeed/varlen.h: a copy would hold the padding and the position ids
  // besides the items, and read no faster). The doctor's remedies copy only a source whose
  // copy speeds its reads (LoaderRecipe::remedies); an explicit cache tier still copies it.
  virtual bool copy_speeds_reads() const { return true; }

  // Reads samples `indices` into `out`: row i of every field receives sample indices[i].
  // `state` is this worker's state from NewWorkerState() (may be null when that returned
  // null). REQUIRES: out.rows == indices.size(); every index in [0, size()).
  // Throws Error naming the file, field and sample index on failure.
  virtual void Read(std::span<const int64_t> indices, const BatchView& out,
                    SourceWorkerState* state) const = 0;

  // Read for sources that draw random choices per sample while reading (an image's random
  // crop): they draw them from `seed` (the loader's MixSeed(seed, epoch)) and the sample
  // index, so a seed and epoch give the same samples whichever worker or batch reads them.
  // Default: Read, ignoring `seed`.
  virtual void ReadSeeded(std::span<const int64_t> indices, const BatchView& out,
                          SourceWorkerState* state, uint64_t /*seed*/) const {
    Read(indices, out, state);
  }

  // Variable-length fields (FieldSpec::variable(): `tokens: int32[*]`) hold their own number
  // of items per sample. A source that has them serves them through these two, which the
  // adaptors that batch them (gpufeed/varlen.h) call; the default throws Error(kUnsupported)
  // (a source without such fields).
  //
  // The item count of field number `field` in sample indices[i], into lengths[i], for any
  // number of indices (an adaptor asks for every sample's at once). A length the data cannot
  // hold (past the values stored, or past what fits 63 bits of bytes) throws Error naming the
  // file, the field and the sample. REQUIRES: lengths.size() == indices.size(); the field is
  // variable; every index in [0, size()) (Error(kInvalidArgument) otherwise).
  virtual void ReadLengths(int field, std::span<const int64_t> /*indices*/,
                           std::span<int64_t> /*lengths*/, SourceWorkerState* /*state*/) const {
    ThrowNoVariableField(*this, field);
  }
  // Items [first, first + count) of field number `field` of sample `index`, into `out`:
  // count * ItemBytes() bytes, count = out.size() / ItemBytes(). `state` is this worker's
  // (null outside a loader's workers). REQUIRES: first >= 0 and first + count within the
  // sample's length as ReadLengths gives it (Error(kInvalidArgument) otherwise).
  virtual void ReadItems(int field, int64_t /*index*/, int64_t /*first*/,
                         std::span<std::byte> /*out*/, SourceWorkerState* /*state*/) const {
    ThrowNoVariableField(*this, field);
  }

  // Many ReadItems at once (a batch's pieces), each as ReadItems serves it, into its own
  // `out`. A source that pays per call (a guard around a mapping, a lock) serves them all
  // under one. Default: ReadItems for each, in order.
  struct ItemsRequest {
    int64_t index = 0;
    int64_t first = 0;
    std::span<std::byte> out = {};
  };
  virtual void ReadItemsMany(int field, std::span<const ItemsRequest> requests,
                             SourceWorkerState* state) const {
    for (const ItemsRequest& r : requests) ReadItems(field, r.index, r.first, r.out, state);
  }

  // Samples a later batch will read, told before the next Read with `state`: a source whose
  // reads cost a round trip may fetch what they will need along with that Read's own requests
  // (the HDF5 source fetches the whole chunks of a remote object they read most of), so that
  // requests stay in flight while batches that need none are built. A hint: what any Read
  // returns never depends on it. Default: ignored.
  virtual void ReadAhead(std::span<const int64_t> /*indices*/, SourceWorkerState* /*state*/) const {
  }
  // Whether ReadAhead does anything, so a loader plans later batches' samples only for a source
  // that uses them. Default: false.
  virtual bool ReadsAhead() const { return false; }
  // How many samples beyond the batches being built the hints should reach, so that the
  // fetches ReadAhead starts keep the store busy (the HDF5 source over a remote object: as
  // many chunks as the store takes requests at once). The loader hints at least as far as
  // the batches it has in flight, and never beyond the next epoch. Default: 0.
  virtual int64_t ReadAheadSamples() const { return 0; }
};

// The checks every Source::Read makes first: one row per index, one pointer per field
// (asserted: the loader's invariants), and every index in [0, source.size()) (an
// Error(kInvalidArgument) naming the source and the index: user input).
void CheckReadRequest(const Source& source, std::span<const int64_t> indices, const BatchView& out);

// `index` when it is a sample of `source` ([0, source.size())); else Error(kInvalidArgument)
// naming the source and the index (user input).
int64_t CheckSampleIndex(const Source& source, int64_t index);

// The checks a ReadItems makes first: the field is variable, `out` holds whole items, and
// [first, first + count) lies within `length`, the sample's item count. Returns count.
// Error(kInvalidArgument) naming the source, field and sample otherwise.
int64_t CheckItemsRequest(const Source& source, int field, int64_t index, int64_t first,
                          std::span<const std::byte> out, int64_t length);

}  // namespace gpufeed
