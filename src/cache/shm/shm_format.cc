#include "cache/shm/shm_format.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'U', 'F', 'C', 'A', 'C', 'H'};

// Byte offsets in the fixed header. Little-endian host order: the file never leaves the node.
enum FixedOffset : size_t {
  kMagicAt = 0,
  kVersionAt = 8,
  kFieldCountAt = 12,
  kHeaderBytesAt = 16,
  kTotalBytesAt = 24,
  kSamplesAt = 32,
  kBlockBytesAt = 40,
  kBlocksAt = 48,
  kDataBytesAt = 56,
  kIdentityLenAt = 64,
  kSchemaLenAt = 72,
  kDescriptionLenAt = 80,
  kCreatedAt = 88,
  kHeaderHashAt = 96,
};

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

template <typename T>
void Put(std::vector<std::byte>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof(T));
}
template <typename T>
T Get(std::span<const std::byte> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

uint64_t VariableBytes(size_t fields, uint64_t blocks, size_t texts) {
  return kShmFixedHeaderBytes + texts + 16 * fields + 8 * blocks;
}

// XXH3 keyed with the user's secret. Not a cryptographic MAC; it does not need to be one:
// the secret and every keyed value live in files only their user can read (0600 in a 0700
// folder), so another user never sees a keyed hash to attack, and cannot compute one.
uint64_t HeaderHash(std::span<const std::byte> bytes, ShmKey key) {
  GPUFEED_ASSERT(key.size() >= XXH3_SECRET_SIZE_MIN, "the header key is too short");
  // The hash field counts as zero: hash around it.
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset_withSecret(state, key.data(), key.size());
  XXH3_64bits_update(state, bytes.data(), kHeaderHashAt);
  const uint64_t zero = 0;
  XXH3_64bits_update(state, &zero, sizeof(zero));
  XXH3_64bits_update(state, bytes.data() + kHeaderHashAt + 8, bytes.size() - kHeaderHashAt - 8);
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return hash;
}

[[noreturn]] void Corrupt(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kCorruptData, fmt::format("shared-memory cache {}: {}", path, what));
}

}  // namespace

bool PlanShmBlocks(ShmLayout& layout) {
  const size_t fields = layout.row_bytes.size();
  layout.rows_per_block.assign(fields, 1);
  layout.first_block.assign(fields, 0);
  uint64_t blocks = 0;
  const auto samples = static_cast<uint64_t>(std::max<int64_t>(0, layout.samples));
  for (size_t f = 0; f < fields; ++f) {
    layout.first_block[f] = blocks;
    const uint64_t row = layout.row_bytes[f];
    if (row == 0) continue;  // nothing to hash
    const uint64_t per = ShmRowsPerBlock(row);
    layout.rows_per_block[f] = per;
    const auto sum = CheckedAdd(blocks, samples / per + (samples % per != 0 ? 1 : 0));
    if (!sum) return false;
    blocks = *sum;
  }
  layout.blocks = blocks;
  return true;
}

ShmLayout PlanShmLayout(const Schema& schema, int64_t samples, const std::string& identity,
                        const std::string& schema_text, const std::string& description) {
  ShmLayout layout;
  layout.samples = samples;
  uint64_t offset = 0;
  for (const FieldSpec& field : schema.fields) {
    layout.field_offsets.push_back(offset);
    const uint64_t row = field.SampleBytes();
    layout.row_bytes.push_back(row);
    const uint64_t bytes =
        MulOrThrow(row, static_cast<uint64_t>(samples), "the cache's field '" + field.name + "'");
    const uint64_t end = AddOrThrow(offset, bytes, "the cache's data");
    (void)AddOrThrow(end, kShmAlign, "the cache's data");  // RoundUp below cannot wrap
    offset = RoundUp(end, kShmAlign);
  }
  layout.data_bytes = offset;
  // Cannot overflow: each field's blocks are at most its rows, and its rows' bytes fit.
  const bool planned = PlanShmBlocks(layout);
  GPUFEED_ASSERT(planned, "block count fits");
  const size_t texts = identity.size() + schema_text.size() + description.size();
  layout.header_bytes =
      RoundUp(VariableBytes(schema.fields.size(), layout.blocks, texts), kShmAlign);
  layout.total_bytes = layout.header_bytes + layout.data_bytes;
  return layout;
}

std::vector<std::byte> EncodeShmHeader(const ShmHeader& header, ShmKey key) {
  const ShmLayout& layout = header.layout;
  GPUFEED_ASSERT(header.block_hashes.size() == layout.blocks, "one hash per block");
  std::vector<std::byte> out(layout.header_bytes, std::byte{0});
  std::memcpy(out.data() + kMagicAt, kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kVersionAt, kShmFormatVersion);
  Put<uint32_t>(out, kFieldCountAt, static_cast<uint32_t>(layout.field_offsets.size()));
  Put<uint64_t>(out, kHeaderBytesAt, layout.header_bytes);
  Put<uint64_t>(out, kTotalBytesAt, layout.total_bytes);
  Put<int64_t>(out, kSamplesAt, layout.samples);
  Put<uint64_t>(out, kBlockBytesAt, kShmBlockBytes);
  Put<uint64_t>(out, kBlocksAt, layout.blocks);
  Put<uint64_t>(out, kDataBytesAt, layout.data_bytes);
  Put<uint64_t>(out, kIdentityLenAt, header.identity.size());
  Put<uint64_t>(out, kSchemaLenAt, header.schema_text.size());
  Put<uint64_t>(out, kDescriptionLenAt, header.description.size());
  Put<int64_t>(out, kCreatedAt, header.created_unix_ns);
  size_t at = kShmFixedHeaderBytes;
  for (const std::string* text : {&header.identity, &header.schema_text, &header.description}) {
    std::memcpy(out.data() + at, text->data(), text->size());
    at += text->size();
  }
  for (uint64_t v : layout.field_offsets) Put<uint64_t>(out, (at += 8) - 8, v);
  for (uint64_t v : layout.row_bytes) Put<uint64_t>(out, (at += 8) - 8, v);
  if (!header.block_hashes.empty()) {
    std::memcpy(out.data() + at, header.block_hashes.data(), 8 * header.block_hashes.size());
  }
  GPUFEED_ASSERT(at + 8 * header.block_hashes.size() <= out.size(), "header overflows its plan");
  Put<uint64_t>(out, kHeaderHashAt, HeaderHash(out, key));
  return out;
}

uint64_t ShmHeaderBytes(std::span<const std::byte> fixed, uint64_t file_size,
                        const std::string& path) {
  if (fixed.size() < kShmFixedHeaderBytes) {
    Corrupt(path, fmt::format("{} bytes is too short for a header", file_size));
  }
  if (std::memcmp(fixed.data() + kMagicAt, kMagic, sizeof(kMagic)) != 0) {
    Corrupt(path, "not a gpufeed cache file (bad magic)");
  }
  const uint32_t version = Get<uint32_t>(fixed, kVersionAt);
  if (version != kShmFormatVersion) {
    Corrupt(path, fmt::format("format version {}, expected {}", version, kShmFormatVersion));
  }
  const uint64_t header_bytes = Get<uint64_t>(fixed, kHeaderBytesAt);
  const uint64_t total = Get<uint64_t>(fixed, kTotalBytesAt);
  if (total != file_size) {
    Corrupt(path, fmt::format("file has {} bytes, its header says {}", file_size, total));
  }
  if (header_bytes < kShmFixedHeaderBytes || header_bytes > total) {
    Corrupt(path, fmt::format("header length {} outside [{}, {}]", header_bytes,
                              kShmFixedHeaderBytes, total));
  }
  return header_bytes;
}

uint64_t ShmHeaderChecksum(std::span<const std::byte> bytes, ShmKey key) {
  GPUFEED_ASSERT(bytes.size() >= kShmFixedHeaderBytes, "a whole fixed header");
  return HeaderHash(bytes, key);
}

ShmHeader DecodeShmHeader(std::span<const std::byte> bytes, uint64_t file_size,
                          const std::string& path, ShmKey key) {
  const uint64_t header_bytes = ShmHeaderBytes(bytes, file_size, path);
  if (bytes.size() != header_bytes) {
    Corrupt(path, fmt::format("header has {} bytes, expected {}", bytes.size(), header_bytes));
  }
  if (HeaderHash(bytes, key) != Get<uint64_t>(bytes, kHeaderHashAt)) {
    Corrupt(path, "header checksum mismatch (damaged, or not written by this user)");
  }
  ShmHeader h;
  ShmLayout& layout = h.layout;
  const size_t fields = Get<uint32_t>(bytes, kFieldCountAt);
  layout.header_bytes = header_bytes;
  layout.total_bytes = file_size;
  layout.samples = Get<int64_t>(bytes, kSamplesAt);
  layout.blocks = Get<uint64_t>(bytes, kBlocksAt);
  layout.data_bytes = Get<uint64_t>(bytes, kDataBytesAt);
  const uint64_t lens[3] = {Get<uint64_t>(bytes, kIdentityLenAt),
                            Get<uint64_t>(bytes, kSchemaLenAt),
                            Get<uint64_t>(bytes, kDescriptionLenAt)};
  h.created_unix_ns = Get<int64_t>(bytes, kCreatedAt);
  // Every length is checked against the header before it is used, in overflow-free order.
  // The block count is checked against the field table below, once that is read.
  if (Get<uint64_t>(bytes, kBlockBytesAt) != kShmBlockBytes || layout.samples < 0 ||
      layout.data_bytes != file_size - header_bytes || layout.blocks > header_bytes ||
      fields > header_bytes || lens[0] > header_bytes || lens[1] > header_bytes ||
      lens[2] > header_bytes ||
      VariableBytes(fields, layout.blocks, lens[0] + lens[1] + lens[2]) > header_bytes) {
    Corrupt(path, "header fields contradict each other");
  }
  size_t at = kShmFixedHeaderBytes;
  for (auto [text, len] : {std::pair{&h.identity, lens[0]}, std::pair{&h.schema_text, lens[1]},
                           std::pair{&h.description, lens[2]}}) {
    text->assign(reinterpret_cast<const char*>(bytes.data() + at), len);
    at += len;
  }
  for (size_t f = 0; f < fields; ++f)
    layout.field_offsets.push_back(Get<uint64_t>(bytes, at + 8 * f));
  at += 8 * fields;
  for (size_t f = 0; f < fields; ++f) layout.row_bytes.push_back(Get<uint64_t>(bytes, at + 8 * f));
  at += 8 * fields;
  h.block_hashes.resize(layout.blocks);
  if (layout.blocks > 0) {  // no memcpy from or to a null pointer, even of 0 bytes
    std::memcpy(h.block_hashes.data(), bytes.data() + at, 8 * layout.blocks);
  }
  for (size_t f = 0; f < fields; ++f) {
    const uint64_t rows = static_cast<uint64_t>(layout.samples);
    if (layout.row_bytes[f] != 0 && rows > (layout.data_bytes / layout.row_bytes[f])) {
      Corrupt(path, fmt::format("field {} does not fit the data region", f));
    }
    if (layout.field_offsets[f] > layout.data_bytes ||
        layout.row_bytes[f] * rows > layout.data_bytes - layout.field_offsets[f]) {
      Corrupt(path, fmt::format("field {} does not fit the data region", f));
    }
  }
  ShmLayout planned = layout;
  if (!PlanShmBlocks(planned) || planned.blocks != layout.blocks) {
    Corrupt(path, fmt::format("{} block hashes, its field table makes {}", layout.blocks,
                              planned.blocks));
  }
  layout = std::move(planned);
  return h;
}

void CheckShmHeaderFor(const ShmHeader& header, const Schema& schema, int64_t samples,
                       const std::string& identity, const std::string& path) {
  const std::string schema_text = schema.ToString();
  if (header.identity != identity || header.schema_text != schema_text ||
      header.layout.samples != samples) {
    // Equal keys with different identities: a hash collision, or a tampered file.
    Corrupt(path, "it was built for a different source");
  }
  const ShmLayout want = PlanShmLayout(schema, samples, identity, schema_text, header.description);
  const ShmLayout& have = header.layout;
  if (have.row_bytes.size() != want.row_bytes.size()) {
    Corrupt(path, fmt::format("its field table has {} fields, the source's schema {}",
                              have.row_bytes.size(), want.row_bytes.size()));
  }
  for (size_t f = 0; f < want.row_bytes.size(); ++f) {
    if (have.row_bytes[f] != want.row_bytes[f] || have.field_offsets[f] != want.field_offsets[f]) {
      Corrupt(path, fmt::format("field '{}' has {} bytes per row at offset {} in its field "
                                "table; the schema says {} at {}",
                                schema.fields[f].name, have.row_bytes[f], have.field_offsets[f],
                                want.row_bytes[f], want.field_offsets[f]));
    }
  }
  if (have.header_bytes != want.header_bytes || have.data_bytes != want.data_bytes ||
      have.blocks != want.blocks || have.total_bytes != want.total_bytes ||
      header.block_hashes.size() != want.blocks) {
    Corrupt(path, fmt::format("its sizes (header {}, data {}, {} blocks, file {}) differ from the "
                              "schema's ({}, {}, {}, {})",
                              have.header_bytes, have.data_bytes, have.blocks, have.total_bytes,
                              want.header_bytes, want.data_bytes, want.blocks, want.total_bytes));
  }
}

std::string ShmCacheKey(const std::string& identity, const std::string& schema_text) {
  const std::string text =
      fmt::format("gpufeed-cache-v{}|{}|{}", kShmFormatVersion, identity, schema_text);
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

uint64_t HashShmBlock(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

}  // namespace gpufeed
