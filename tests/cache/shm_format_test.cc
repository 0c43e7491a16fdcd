#include "cache/shm_format.h"

#include <gtest/gtest.h>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

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
  EXPECT_EQ(l.blocks, (l.data_bytes + kShmBlockBytes - 1) / kShmBlockBytes);
  EXPECT_EQ(l.RowBegin(1, 10), l.field_offsets[1] + 80);
}

TEST(ShmFormatTest, RoundTrips) {
  const ShmHeader h = Header();
  const auto bytes = EncodeShmHeader(h);
  ASSERT_EQ(bytes.size(), h.layout.header_bytes);
  EXPECT_EQ(ShmHeaderBytes(bytes, h.layout.total_bytes, "f"), h.layout.header_bytes);
  const ShmHeader d = DecodeShmHeader(bytes, h.layout.total_bytes, "f");
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
  const auto good = EncodeShmHeader(h);
  for (size_t at = 0; at < good.size(); ++at) {
    auto bad = good;
    bad[at] ^= std::byte{0x20};
    EXPECT_THROW(DecodeShmHeader(bad, h.layout.total_bytes, "f"), Error) << "byte " << at;
  }
}

TEST(ShmFormatTest, AFileOfAnotherSizeOrTruncatedHeaderIsCorrupt) {
  const ShmHeader h = Header();
  const auto bytes = EncodeShmHeader(h);
  try {
    DecodeShmHeader(bytes, h.layout.total_bytes - 1, "/dev/shm/gpufeed-x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("/dev/shm/gpufeed-x"), std::string::npos);
  }
  EXPECT_THROW(ShmHeaderBytes(std::span(bytes).first(20), h.layout.total_bytes, "f"), Error);
  EXPECT_THROW(DecodeShmHeader(std::span(bytes).first(bytes.size() - 8), h.layout.total_bytes, "f"),
               Error);
}

}  // namespace
}  // namespace gpufeed
