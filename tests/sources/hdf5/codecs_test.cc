// The chunk decoders on crafted input: bitshuffle's transform against its definition, sizes a
// chunk declares checked before anything is decoded, and damaged framings as errors.
#include "sources/hdf5/filters/codecs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <random>
#include <vector>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "sources/hdf5/filters/filters.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

void PutBe(std::vector<std::byte>& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// Bitshuffle by its definition: bit b of byte j of element i is bit i%8 of byte i/8 of
// bit-row j*8+b.
std::vector<std::byte> NaiveBitshuffle(const std::vector<std::byte>& in, size_t n, size_t es) {
  std::vector<std::byte> out(n * es);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < es; ++j) {
      for (size_t b = 0; b < 8; ++b) {
        if (std::to_integer<int>(in[i * es + j]) >> b & 1) {
          out[(j * 8 + b) * (n / 8) + i / 8] |= static_cast<std::byte>(1 << (i % 8));
        }
      }
    }
  }
  return out;
}

TEST(Hdf5CodecsTest, BitshuffleMatchesItsDefinitionBothWays) {
  std::mt19937 rng(5);
  for (size_t es : {1, 2, 4, 8, 3}) {
    const size_t n = 64;
    std::vector<std::byte> in(n * es);
    for (auto& b : in) b = static_cast<std::byte>(rng());
    std::vector<std::byte> shuffled(in.size()), back(in.size());
    BitshuffleBlock(in.data(), shuffled.data(), n, es);
    EXPECT_EQ(shuffled, NaiveBitshuffle(in, n, es)) << "element size " << es;
    BitunshuffleBlock(shuffled.data(), back.data(), n, es);
    EXPECT_EQ(back, in) << "element size " << es;
  }
  // One bit: element 1's bit 0 is row 0's bit 1; element 0's bit 1 is row 1's bit 0.
  std::vector<std::byte> out(8);
  BitshuffleBlock(Bytes({0, 1, 0, 0, 0, 0, 0, 0}).data(), out.data(), 8, 1);
  EXPECT_EQ(out, Bytes({2, 0, 0, 0, 0, 0, 0, 0}));
  BitshuffleBlock(Bytes({2, 0, 0, 0, 0, 0, 0, 0}).data(), out.data(), 8, 1);
  EXPECT_EQ(out, Bytes({0, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(Hdf5CodecsTest, UncompressedBitshuffleKeepsTheTrailingElements) {
  // 21 two-byte elements in blocks of 8: two blocks transposed, five elements as they are.
  std::vector<std::byte> plain(42);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<std::byte>(i * 7 + 1);
  std::vector<std::byte> stored(plain);
  BitshuffleBlock(plain.data(), stored.data(), 8, 2);
  BitshuffleBlock(plain.data() + 16, stored.data() + 16, 8, 2);
  std::vector<std::byte> out(42);
  EXPECT_EQ(DecodeBitshuffle(stored, out, true, 2, 8, 0), 42u);
  EXPECT_EQ(out, plain);
}

TEST(Hdf5CodecsTest, Lz4HeaderDeclaringMoreThanTheChunkIsRefusedBeforeDecoding) {
  std::vector<std::byte> in;
  PutBe(in, uint64_t{1} << 40, 8);
  PutBe(in, 1 << 20, 4);
  std::vector<std::byte> out(4096, std::byte{0x5a});
  std::string message;
  EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeHdf5Lz4(in, out, true); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("declares 1099511627776 decoded bytes, more than the 4096"));
  EXPECT_EQ(out[0], std::byte{0x5a});
}

TEST(Hdf5CodecsTest, Lz4ZeroBlockSizeAndShortBlocksAreErrors) {
  std::vector<std::byte> zero;
  PutBe(zero, 16, 8);
  PutBe(zero, 0, 4);
  std::vector<std::byte> out(16);
  EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeHdf5Lz4(zero, out, true); }), ErrorCode::kCorruptData);
  std::vector<std::byte> truncated;
  PutBe(truncated, 16, 8);
  PutBe(truncated, 16, 4);
  PutBe(truncated, 16, 4);  // 16 stored bytes claimed, 3 present
  truncated.resize(truncated.size() + 3);
  std::string message;
  EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeHdf5Lz4(truncated, out, true); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("claims 16 stored bytes, 3 remain"));
}

TEST(Hdf5CodecsTest, Lz4BlocksRoundTripWithAStoredBlock) {
  // Two blocks of 64: the first compressed, the second stored as it is (its stored size equals
  // the block size).
  std::vector<char> plain(128);
  for (int i = 0; i < 64; ++i) plain[i] = 'a';
  for (int i = 64; i < 128; ++i) plain[i] = static_cast<char>(i * 37);
  std::vector<char> c(LZ4_compressBound(64));
  const int n = LZ4_compress_default(plain.data(), c.data(), 64, static_cast<int>(c.size()));
  std::vector<std::byte> in;
  PutBe(in, 128, 8);
  PutBe(in, 64, 4);
  PutBe(in, static_cast<uint64_t>(n), 4);
  for (int i = 0; i < n; ++i) in.push_back(static_cast<std::byte>(c[i]));
  PutBe(in, 64, 4);
  for (int i = 64; i < 128; ++i) in.push_back(static_cast<std::byte>(plain[i]));
  std::vector<std::byte> out(128);
  EXPECT_EQ(DecodeHdf5Lz4(in, out, true), 128u);
  EXPECT_EQ(std::memcmp(out.data(), plain.data(), 128), 0);
}

TEST(Hdf5CodecsTest, DeflateLargerThanTheChunkIsAnErrorWithEitherInflater) {
  std::vector<unsigned char> plain(10000, 'x');
  uLongf len = compressBound(plain.size());
  std::vector<std::byte> in(len);
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(in.data()), &len, plain.data(), plain.size(), 1),
            Z_OK);
  in.resize(len);
  std::vector<std::byte> out(4096);
  for (bool zlib : {false, true}) {
    SetHdf5InflateWithZlib(zlib);
    std::string message;
    EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeDeflate(in, out, true); }, &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, HasSubstr("more than the 4096 bytes")) << (zlib ? "zlib" : "libdeflate");
    std::vector<std::byte> big(20000);
    EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeDeflate(in, big, true); }, &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, HasSubstr("decodes to 10000 bytes, the chunk holds 20000"));
  }
  SetHdf5InflateWithZlib(false);
}

TEST(Hdf5CodecsTest, ZstdWithoutAContentSizeIsBoundedByTheChunk) {
  // A streamed frame does not declare its size: the bound is the output buffer.
  std::vector<char> plain(10000, 'z');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  std::vector<std::byte> in(ZSTD_compressBound(plain.size()));
  ZSTD_outBuffer ob{in.data(), in.size(), 0};
  ZSTD_inBuffer ib{plain.data(), plain.size(), 0};
  ASSERT_EQ(ZSTD_compressStream2(cctx, &ob, &ib, ZSTD_e_end), 0u);
  ZSTD_freeCCtx(cctx);
  in.resize(ob.pos);
  std::vector<std::byte> out(4096);
  std::string message;
  EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeZstd(in, out, true); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("more than the 4096 bytes"));
  std::vector<std::byte> exact(10000);
  EXPECT_EQ(DecodeZstd(in, exact, true), 10000u);
}

TEST(Hdf5CodecsTest, GarbageIsAnErrorForEveryDecoder) {
  std::mt19937 rng(9);
  std::vector<std::byte> garbage(300);
  for (auto& b : garbage) b = static_cast<std::byte>(rng());
  std::vector<std::byte> out(1024);
  for (int id : {kHdf5FilterDeflate, kHdf5FilterLzf, kHdf5FilterBlosc, kHdf5FilterLz4,
                 kHdf5FilterZstd, kHdf5FilterBitshuffle}) {
    std::vector<Hdf5Filter> chain = {{id, "", {}}};
    if (id == kHdf5FilterBitshuffle) chain[0].cd_values = {0, 3, 4, 0, 2};
    std::vector<std::byte> scratch;
    EXPECT_EQ(testing::ErrorCodeOf([&] { DecodeHdf5Chunk(garbage, chain, 0, 4, out, scratch); }),
              ErrorCode::kCorruptData)
        << "filter " << id;
  }
}

TEST(Hdf5CodecsTest, FilterNamesAndProviders) {
  EXPECT_EQ(Hdf5FilterName(32013), "zfp");
  EXPECT_THAT(Hdf5FilterProvider(32013), HasSubstr("hdf5-filter-plugin-zfp-serial"));
  EXPECT_THAT(Hdf5FilterProvider(99999), HasSubstr("hdf5plugin"));
  EXPECT_EQ(DescribeHdf5Filters({{32001, "blosc", {2, 2, 4, 4096, 5, 2, 1}}}),
            "blosc lz4 + bitshuffle");
  EXPECT_EQ(DescribeHdf5Filters({{32008, "bitshuffle", {0, 3, 4, 0, 2}}}), "bitshuffle + lz4");
}

}  // namespace
}  // namespace gpufeed
