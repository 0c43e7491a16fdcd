#include "cache/shm/shm_format.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cache/shm/shm_user_dir.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// A user's secret (ShmUserDir makes a random one).
const std::vector<std::byte> kKey(kShmSecretBytes, std::byte{0x42});

ShmHeader Header() {
  ShmHeader h;
  h.identity = "numpy:/data|x:float32[3]=/data/x.npy:1200:5:128";
  const Schema schema = ParseSchema("x:float32[3],y:int64[]");
  h.schema_text = schema.ToString();
  h.description = "numpy:/data (2 fields, 100000 samples)";
  h.created_unix_ns = 1234;
  h.layout = PlanShmLayout(schema, 100000, h.identity, h.schema_text, h.description);
  for (uint64_t b = 0; b < h.layout.blocks; ++b) h.block_hashes.push_back(b * 7919);
  return h;
}

TEST(ShmFormatTest, LayoutAlignsFieldsAndCoversTheDataWithBlocks) {
  const ShmLayout l = Header().layout;
  EXPECT_EQ(l.field_offsets[0], 0u);
  EXPECT_EQ(l.field_offsets[1], (uint64_t{1200000} + 4095) / 4096 * 4096);
  EXPECT_EQ(l.header_bytes % kShmAlign, 0u);
  EXPECT_EQ(l.total_bytes, l.header_bytes + l.data_bytes);
  EXPECT_EQ(l.RowBegin(1, 10), l.field_offsets[1] + 80);
  // Blocks of whole rows per field: 12-byte rows 341 a block, 8-byte rows 512 a block.
  EXPECT_EQ(l.rows_per_block[0], 341u);
  EXPECT_EQ(l.rows_per_block[1], 512u);
  EXPECT_EQ(l.first_block[0], 0u);
  EXPECT_EQ(l.first_block[1], (100000u + 340) / 341);
  EXPECT_EQ(l.blocks, l.first_block[1] + (100000u + 511) / 512);
  EXPECT_EQ(l.BlockOf(0, 340), 0u);
  EXPECT_EQ(l.BlockOf(0, 341), 1u);
  EXPECT_EQ(l.BlockOf(1, 0), l.first_block[1]);
  EXPECT_EQ(l.BlockEndRow(1, (100000u + 511) / 512 - 1), 100000);
}

// Rows of a block's size or more are a block each: a reader hashes exactly the row it copied.
TEST(ShmFormatTest, LargeRowsAreOneBlockEach) {
  const Schema schema = ParseSchema("mel:float32[1,64,32],odd:uint8[5000],y:int64[]");
  const ShmLayout l = PlanShmLayout(schema, 1000, "id", schema.ToString(), "d");
  EXPECT_EQ(l.rows_per_block[0], 1u);
  EXPECT_EQ(l.rows_per_block[1], 1u);
  EXPECT_EQ(l.first_block[1], 1000u);
  EXPECT_EQ(l.first_block[2], 2000u);
  EXPECT_EQ(l.blocks, 2000u + 2);  // 1000 labels: 512 + 488
  EXPECT_EQ(l.BlockOf(1, 999), 1999u);
}

// An old cache file (format 3: 16 KiB blocks over the data region) is refused by its version
// before anything else of it is read, so it is rebuilt, never misread.
TEST(ShmFormatTest, AnOlderFormatVersionIsRefused) {
  const ShmHeader h = Header();
  auto bytes = EncodeShmHeader(h, kKey);
  const uint32_t old = 3;
  std::memcpy(bytes.data() + 8, &old, sizeof(old));
  try {
    ShmHeaderBytes(bytes, h.layout.total_bytes, "f");
    FAIL() << "format 3 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("format version 3, expected 4"), std::string::npos)
        << e.what();
  }
}

// A checksummed header whose block count does not follow from its own field table.
TEST(ShmFormatTest, ABlockCountThatContradictsTheFieldTableIsRefused) {
  ShmHeader h = Header();
  h.layout.blocks -= 1;
  h.block_hashes.pop_back();
  try {
    DecodeShmHeader(EncodeShmHeader(h, kKey), h.layout.total_bytes, "f", kKey);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("block hashes, its field table makes"), std::string::npos)
        << e.what();
  }
}

TEST(ShmFormatTest, RoundTrips) {
  const ShmHeader h = Header();
  const auto bytes = EncodeShmHeader(h, kKey);
  ASSERT_EQ(bytes.size(), h.layout.header_bytes);
  EXPECT_EQ(ShmHeaderBytes(bytes, h.layout.total_bytes, "f"), h.layout.header_bytes);
  const ShmHeader d = DecodeShmHeader(bytes, h.layout.total_bytes, "f", kKey);
  EXPECT_EQ(d.identity, h.identity);
  EXPECT_EQ(d.schema_text, h.schema_text);
  EXPECT_EQ(d.description, h.description);
  EXPECT_EQ(d.created_unix_ns, 1234);
  EXPECT_EQ(d.block_hashes, h.block_hashes);
  EXPECT_EQ(d.layout.field_offsets, h.layout.field_offsets);
  EXPECT_EQ(d.layout.row_bytes, h.layout.row_bytes);
  EXPECT_EQ(d.layout.samples, 100000);
}

TEST(ShmFormatTest, EveryFlippedHeaderByteIsCaught) {
  const ShmHeader h = Header();
  const auto good = EncodeShmHeader(h, kKey);
  for (size_t at = 0; at < good.size(); ++at) {
    auto bad = good;
    bad[at] ^= std::byte{0x20};
    EXPECT_THROW(DecodeShmHeader(bad, h.layout.total_bytes, "f", kKey), Error) << "byte " << at;
  }
}

TEST(ShmFormatTest, AFileOfAnotherSizeOrTruncatedHeaderIsCorrupt) {
  const ShmHeader h = Header();
  const auto bytes = EncodeShmHeader(h, kKey);
  try {
    DecodeShmHeader(bytes, h.layout.total_bytes - 1, "/dev/shm/gpufeed-x", kKey);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("/dev/shm/gpufeed-x"), std::string::npos);
  }
  EXPECT_THROW(ShmHeaderBytes(std::span(bytes).first(20), h.layout.total_bytes, "f"), Error);
  EXPECT_THROW(
      DecodeShmHeader(std::span(bytes).first(bytes.size() - 8), h.layout.total_bytes, "f", kKey),
      Error);
}

TEST(ShmFormatTest, AHeaderChecksummedWithAnotherUsersKeyIsRefused) {
  const ShmHeader h = Header();
  std::vector<std::byte> other(kShmSecretBytes, std::byte{0x43});
  const auto forged = EncodeShmHeader(h, other);
  try {
    DecodeShmHeader(forged, h.layout.total_bytes, "/dev/shm/gpufeed-user-1/gpufeed-k", kKey);
    FAIL() << "a header keyed for another user was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/dev/shm/gpufeed-user-1/gpufeed-k"), std::string::npos);
  }
}

// A header whose field table (correctly checksummed: its writer had the key) disagrees with
// the source's schema must be refused before any read: 72 bytes per row where the schema
// says 64 would write past the batch buffer; an extra field would read past the view vector.
void ExpectRefusedFor(const ShmHeader& h, const Schema& schema, const std::string& what) {
  const auto bytes = EncodeShmHeader(h, kKey);
  const ShmHeader decoded = DecodeShmHeader(bytes, h.layout.total_bytes, "cachefile", kKey);
  try {
    CheckShmHeaderFor(decoded, schema, 100000, h.identity, "cachefile");
    FAIL() << "accepted: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("cachefile"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(ShmFormatTest, AFieldTableThatDisagreesWithTheSchemaIsRefused) {
  const Schema schema = ParseSchema("x:float32[3],y:int64[]");
  const ShmHeader good = Header();
  EXPECT_NO_THROW(CheckShmHeaderFor(
      DecodeShmHeader(EncodeShmHeader(good, kKey), good.layout.total_bytes, "f", kKey), schema,
      100000, good.identity, "f"));
  ShmHeader wide = good;
  wide.layout.row_bytes[0] = 16;  // the schema says 12; its blocks follow the table
  ASSERT_TRUE(PlanShmBlocks(wide.layout));
  wide.block_hashes.assign(wide.layout.blocks, 1);
  ExpectRefusedFor(wide, schema, "field 'x' has 16 bytes per row");
  ShmHeader moved = good;
  moved.layout.field_offsets[1] -= 4096;  // overlaps field x: still inside the data region
  ExpectRefusedFor(moved, schema, "field 'y' has 8 bytes per row at offset");
  // One field more than the schema, in a header that is otherwise consistent.
  const Schema three = ParseSchema("x:float32[3],y:int64[],z:int64[]");
  ShmHeader extra = good;
  extra.schema_text = schema.ToString();
  extra.layout = PlanShmLayout(three, 100000, good.identity, extra.schema_text, good.description);
  extra.block_hashes.assign(extra.layout.blocks, 1);
  ExpectRefusedFor(extra, schema, "3 fields, the source's schema 2");
  ShmHeader fewer = good;
  fewer.layout.samples = 99999;
  ExpectRefusedFor(fewer, schema, "built for a different source");
}

}  // namespace
}  // namespace gpufeed
