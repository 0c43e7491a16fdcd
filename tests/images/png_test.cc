// PNG pixels as PIL's convert("RGB") gives them: the stored values whatever gAMA says, 16-bit
// RGB(A) and grey+alpha by their high byte (interlaced or not), 16-bit grey scaled to 8 bits
// (gpufeed's choice: PIL clips it), the orientation an eXIf chunk gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <span>

#include "gpufeed/error.h"
#include "images/decode.h"
#include "images/test_util.h"

namespace gpufeed {
namespace {

using testing::EncodePngRaw;
using testing::Pattern;
using testing::PngExtras;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

RgbImage Decode(const std::string& file, ImageHeader* header_out = nullptr) {
  ImageDecoder decoder;
  const ImageHeader header = decoder.ReadHeader(Bytes(file), "f.png", 1u << 30);
  if (header_out != nullptr) *header_out = header;
  RgbImage out;
  decoder.Decode(Bytes(file), header, {}, "f.png", out);
  return out;
}

// 16-bit samples whose high and low bytes both vary (big-endian, as PNG stores them).
std::vector<uint8_t> Pattern16(int width, int height, int channels) {
  std::vector<uint8_t> out;
  const auto high = Pattern(width, height, channels, 3);
  const auto low = Pattern(width, height, channels, 11);
  for (size_t i = 0; i < high.size(); ++i) {
    out.push_back(high[i]);
    out.push_back(static_cast<uint8_t>(low[i] * 7));
  }
  return out;
}

TEST(ImagePngTest, GammaIsNotAppliedTheStoredValuesComeOut) {
  const auto rgb = Pattern(17, 9, 3);
  for (const double gamma : {1.0, 1 / 2.2, 0.7}) {
    SCOPED_TRACE(gamma);
    EXPECT_EQ(Decode(EncodePngRaw(rgb, 17, 9, 8, 2, {.gamma = gamma})).pixels, rgb);
  }
  const auto grey = Pattern(17, 9, 1);
  const RgbImage out = Decode(EncodePngRaw(grey, 17, 9, 8, 0, {.gamma = 1.0}));
  for (size_t i = 0; i < grey.size(); ++i) ASSERT_EQ(out.pixels[i * 3 + 1], grey[i]);
}

TEST(ImagePngTest, SixteenBitColourIsItsHighByteInterlacedOrNot) {
  const int w = 37;
  const int h = 23;
  for (const int colour : {2, 6, 4}) {
    const int channels = colour == 2 ? 3 : colour == 6 ? 4 : 2;
    const auto samples = Pattern16(w, h, channels);
    std::vector<uint8_t> expected;
    for (size_t p = 0; p < static_cast<size_t>(w) * h; ++p) {
      for (int c = 0; c < 3; ++c) {
        const int channel = channels >= 3 ? c : 0;  // grey+alpha: the grey in R, G and B
        expected.push_back(samples[(p * channels + channel) * 2]);
      }
    }
    for (const bool interlaced : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "colour " << colour << " interlaced " << interlaced);
      EXPECT_EQ(Decode(EncodePngRaw(samples, w, h, 16, colour, {.interlaced = interlaced})).pixels,
                expected);
    }
  }
}

TEST(ImagePngTest, SixteenBitGreyIsScaledToEightBits) {
  // v * 255 / 65535 rounded: 257 * k is k; PIL would clip 1000 and 65535 to 255, 128 to 128.
  const std::vector<uint16_t> values = {0, 128, 129, 1000, 257 * 77, 32768, 65535};
  std::vector<uint8_t> samples;
  for (const uint16_t v : values) {
    samples.push_back(static_cast<uint8_t>(v >> 8));
    samples.push_back(static_cast<uint8_t>(v & 255));
  }
  const int n = static_cast<int>(values.size());
  for (const bool interlaced : {false, true}) {
    const RgbImage out = Decode(EncodePngRaw(samples, n, 1, 16, 0, {.interlaced = interlaced}));
    std::vector<int> grey;
    for (int i = 0; i < n; ++i) grey.push_back(out.pixels[static_cast<size_t>(i) * 3]);
    EXPECT_THAT(grey, ::testing::ElementsAre(0, 0, 1, 4, 77, 128, 255));
  }
}

TEST(ImagePngTest, ExifChunkGivesTheOrientation) {
  const auto rgb = Pattern(6, 4, 3);
  for (const int orientation : {1, 3, 6, 8}) {
    ImageHeader header;
    const RgbImage out =
        Decode(EncodePngRaw(rgb, 6, 4, 8, 2, {.exif = testing::ExifTiff(orientation)}), &header);
    EXPECT_EQ(header.orientation, orientation);
    EXPECT_EQ(out.pixels, rgb);  // stored as is: the source applies the orientation
  }
  // Some writers keep JPEG's "Exif\0\0" before the TIFF structure.
  ImageHeader header;
  Decode(EncodePngRaw(rgb, 6, 4, 8, 2, {.exif = std::string("Exif\0\0", 6) + testing::ExifTiff(6)}),
         &header);
  EXPECT_EQ(header.orientation, 6);
  Decode(EncodePngRaw(rgb, 6, 4, 8, 2), &header);
  EXPECT_EQ(header.orientation, 1);
}

}  // namespace
}  // namespace gpufeed
