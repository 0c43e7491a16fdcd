// The shared-memory cache file: a header, then one region per field (samples along axis 0).
//
//   [fixed header | identity | schema | description | field offsets | row bytes |
//    block hashes] pad 4 KiB
//   [field 0: samples x row bytes] pad 4 KiB [field 1 ...] ...
//
// Each field's rows are cut into blocks of whole rows, each with a 64-bit XXH3 hash in the
// header, written when the file is published: one row per block when a row has
// kShmBlockBytes or more, else as many rows as fit in kShmBlockBytes (a label field of 8-byte
// rows: 512 rows a block). `gpufeed cache verify` re-hashes them and names the first block
// that differs; readers do not (only the owner can write the file, see shm_source.h). The
// header carries a hash of itself (the texts, the field table and the block hashes) keyed
// with the user's secret (ShmUserDir), so a header another user wrote does not verify. A
// reader checks the header and its field table against the source's schema when it opens the
// file, before it maps it.
// Format versions are part of the cache key (CacheKey), and a file of another version
// fails ShmHeaderBytes: an older cache is never misread; it is rebuilt under the new key
// (`gpufeed cache gc` removes the old file, which lists as invalid).
// Thread-safety: values and pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpufeed/schema.h"

namespace gpufeed {

inline constexpr uint32_t kShmFormatVersion = 4;
// Rows shorter than this are hashed in groups of up to this many bytes; longer rows alone.
inline constexpr uint64_t kShmBlockBytes = uint64_t{4} << 10;
inline constexpr uint64_t kShmAlign = 4096;
// The fixed part of the header: read first, it says how long the rest is.
inline constexpr size_t kShmFixedHeaderBytes = 128;

// Where everything lies in a cache file of a schema and sample count.
struct ShmLayout {
  int64_t samples = 0;
  std::vector<uint64_t> field_offsets = {};  // from the start of the data region
  std::vector<uint64_t> row_bytes = {};      // per field
  uint64_t header_bytes = 0;                 // also where the data region starts
  uint64_t data_bytes = 0;
  uint64_t blocks = 0;                        // all fields' blocks
  uint64_t total_bytes = 0;                   // the file's size
  std::vector<uint64_t> rows_per_block = {};  // per field (ShmRowsPerBlock of its row bytes)
  std::vector<uint64_t> first_block = {};     // per field: the index of its first block

  // Data-region bytes [begin, end) of sample `index` of field `field`.
  uint64_t RowBegin(size_t field, int64_t index) const {
    return field_offsets[field] + static_cast<uint64_t>(index) * row_bytes[field];
  }
  // The block that holds sample `index` of field `field`. REQUIRES: row_bytes[field] > 0.
  uint64_t BlockOf(size_t field, int64_t index) const {
    return first_block[field] + static_cast<uint64_t>(index) / rows_per_block[field];
  }
  // The samples [first, end) of block `k` of field `field` (k counted within the field).
  int64_t BlockFirstRow(size_t field, uint64_t k) const {
    return static_cast<int64_t>(k * rows_per_block[field]);
  }
  int64_t BlockEndRow(size_t field, uint64_t k) const {
    return static_cast<int64_t>(
        std::min<uint64_t>(static_cast<uint64_t>(samples), (k + 1) * rows_per_block[field]));
  }
};

// Rows per block of a field with `row_bytes` bytes a row: 1 for rows of kShmBlockBytes or
// more, else as many as fit in kShmBlockBytes. REQUIRES: row_bytes > 0.
inline uint64_t ShmRowsPerBlock(uint64_t row_bytes) {
  return row_bytes >= kShmBlockBytes ? 1 : kShmBlockBytes / row_bytes;
}
// Fills rows_per_block, first_block and blocks from samples and row_bytes. False (layout
// unchanged past row_bytes) when the block count overflows 64 bits.
bool PlanShmBlocks(ShmLayout& layout);

struct ShmHeader {
  std::string identity = {};     // Source::Identity() of the cached source
  std::string schema_text = {};  // Schema::ToString()
  std::string description = {};  // Source::Describe(), for `gpufeed cache ls`
  int64_t created_unix_ns = 0;
  ShmLayout layout = {};
  std::vector<uint64_t> block_hashes = {};  // layout.blocks of them
};

// The layout for a schema, sample count and the header's texts. REQUIRES: samples >= 0.
ShmLayout PlanShmLayout(const Schema& schema, int64_t samples, const std::string& identity,
                        const std::string& schema_text, const std::string& description);

// The key of the header checksum: the user's secret (at least 136 bytes, XXH3's minimum).
using ShmKey = std::span<const std::byte>;

// The header's bytes: exactly header.layout.header_bytes of them, checksummed with `key`.
std::vector<std::byte> EncodeShmHeader(const ShmHeader& header, ShmKey key);

// The keyed checksum of a whole header (its checksum field counted as zero).
// REQUIRES: bytes.size() >= kShmFixedHeaderBytes.
uint64_t ShmHeaderChecksum(std::span<const std::byte> bytes, ShmKey key);
// Where the checksum lies in the fixed header.
inline constexpr size_t kShmHeaderChecksumAt = 96;

// Bytes the whole header takes, read from its fixed part (kShmFixedHeaderBytes bytes).
// Throws Error(kCorruptData) naming `path` when the fixed part is not a gpufeed cache header of
// this format version or contradicts `file_size`.
uint64_t ShmHeaderBytes(std::span<const std::byte> fixed, uint64_t file_size,
                        const std::string& path);
// Decodes and verifies a whole header (its keyed checksum, sizes, offsets against
// `file_size`). Throws Error(kCorruptData) naming `path` and what is wrong.
ShmHeader DecodeShmHeader(std::span<const std::byte> bytes, uint64_t file_size,
                          const std::string& path, ShmKey key);

// Checks a decoded header against the source it is to serve: the identity, schema text and
// sample count, and the whole layout (field count, row bytes, offsets, sizes) against the one
// PlanShmLayout makes for `schema`, so no byte of the file decides where a read goes. Throws
// Error(kCorruptData) naming `path` and the first difference.
void CheckShmHeaderFor(const ShmHeader& header, const Schema& schema, int64_t samples,
                       const std::string& identity, const std::string& path);

// The cache key (16 hex digits) of a source's Identity() and Schema::ToString() (CacheKey):
// `gpufeed cache verify` checks that a header's texts give the key its file is named by.
std::string ShmCacheKey(const std::string& identity, const std::string& schema_text);

// The block checksum (XXH3, 64 bits) of a block's rows.
uint64_t HashShmBlock(const void* data, size_t bytes);

}  // namespace gpufeed
