// Decoding JPEG and PNG files: pixels equal libjpeg-turbo's own decode, grey and palette
// become RGB, EXIF orientation, PIL-style resampling, and every malformed header refused.
#include "images/decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <span>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "images/crop.h"
#include "images/resample.h"
#include "images/test_util.h"

namespace gpufeed {
namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::Pattern;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

RgbImage Decode(const std::string& file, DctScale scale = {}, uint64_t max_pixels = 1u << 30) {
  ImageDecoder decoder;
  const ImageHeader header = decoder.ReadHeader(Bytes(file), "f", max_pixels);
  RgbImage out;
  decoder.Decode(Bytes(file), header, scale, "f", out);
  return out;
}

std::string DecodeError(const std::string& file, uint64_t max_pixels = 1u << 30) {
  try {
    Decode(file, {}, max_pixels);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ImageDecodeTest, JpegEqualsTurboJpegsOwnDecode) {
  const std::string jpeg = testing::RgbJpeg(45, 31);
  int w = 0;
  int h = 0;
  const auto expected = testing::TurboDecode(jpeg, w, h);
  const RgbImage out = Decode(jpeg);
  EXPECT_EQ(out.width, 45);
  EXPECT_EQ(out.height, 31);
  EXPECT_EQ(out.pixels, expected);
}

TEST(ImageDecodeTest, DctScalingShrinksEachSideRoundingUp) {
  const RgbImage out = Decode(testing::RgbJpeg(45, 31), {1, 4});
  EXPECT_EQ(out.width, 12);
  EXPECT_EQ(out.height, 8);
  EXPECT_EQ(out.pixels.size(), 12u * 8 * 3);
  const RgbImage five = Decode(testing::RgbJpeg(45, 31), {5, 8});
  EXPECT_EQ(five.width, 29);
  EXPECT_EQ(five.height, 20);
}

TEST(ImageDecodeTest, GreyJpegBecomesRgbWithEqualChannels) {
  const auto grey = Pattern(20, 10, 1);
  const std::string jpeg = EncodeJpeg(grey, 20, 10, TJPF_GRAY);
  const RgbImage out = Decode(jpeg);
  ASSERT_EQ(out.pixels.size(), 20u * 10 * 3);
  for (size_t i = 0; i < 200; ++i) {
    EXPECT_EQ(out.pixels[i * 3], out.pixels[i * 3 + 1]);
    EXPECT_EQ(out.pixels[i * 3], out.pixels[i * 3 + 2]);
    EXPECT_NEAR(out.pixels[i * 3], grey[i], 12);
  }
}

TEST(ImageDecodeTest, CmykJpegBecomesRgb) {
  // TurboJPEG's CMYK buffers, like Adobe's files, hold inverted ink (255 = none): the top half
  // has no ink (white), the bottom half full black ink only (black).
  std::vector<uint8_t> cmyk(16 * 16 * 4, 255);
  for (size_t i = 16 * 8; i < 256; ++i) cmyk[i * 4 + 3] = 0;
  const std::string jpeg = EncodeJpeg(cmyk, 16, 16, TJPF_CMYK);
  ImageDecoder decoder;
  const ImageHeader header = decoder.ReadHeader(Bytes(jpeg), "f", 1000);
  EXPECT_TRUE(header.cmyk);
  EXPECT_TRUE(header.adobe);
  RgbImage out;
  decoder.Decode(Bytes(jpeg), header, {}, "f", out);
  ASSERT_EQ(out.pixels.size(), 16u * 16 * 3);
  for (int c = 0; c < 3; ++c) {
    EXPECT_GE(out.pixels[c], 250) << c;                // white
    EXPECT_LE(out.pixels[(16 * 15) * 3 + c], 5) << c;  // black
  }
}

TEST(ImageDecodeTest, ExifOrientationIsReadAndApplied) {
  const std::string jpeg = testing::RgbJpeg(24, 16);
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const std::string rotated = testing::WithExifOrientation(jpeg, orientation);
    EXPECT_EQ(ReadJpegMarkers(Bytes(rotated)).orientation, orientation);
    RgbImage image = Decode(rotated);
    const RgbImage stored = image;
    RgbImage scratch;
    ApplyOrientation(orientation, image, scratch);
    EXPECT_EQ(image.width, SwapsAxes(orientation) ? 16 : 24);
    // Orientation 6 (rotate 90 clockwise): stored (x, y) lands at (h - 1 - y, x).
    if (orientation == 6) {
      for (int y = 0; y < 16; ++y) {
        for (int x = 0; x < 24; ++x) {
          EXPECT_EQ(image.pixels[(static_cast<size_t>(x) * 16 + (15 - y)) * 3],
                    stored.pixels[(static_cast<size_t>(y) * 24 + x) * 3]);
        }
      }
    }
    if (orientation == 3) {  // rotate 180
      EXPECT_EQ(image.pixels[0], stored.pixels[stored.pixels.size() - 3]);
    }
  }
  EXPECT_EQ(ReadJpegMarkers(Bytes(jpeg)).orientation, 1);
}

TEST(ImageDecodeTest, MarkerWalkSurvivesEveryTruncation) {
  const std::string file = testing::WithExifOrientation(testing::RgbJpeg(8, 8), 6);
  for (size_t n = 0; n <= 64; ++n) {
    const std::string cut = file.substr(0, n);
    const JpegMarkers markers = ReadJpegMarkers(Bytes(cut));
    EXPECT_TRUE(markers.orientation == 1 || markers.orientation == 6);
  }
}

TEST(ImageDecodeTest, PngColourTypesBecomeRgb) {
  const auto rgb = Pattern(13, 7, 3);
  EXPECT_EQ(Decode(EncodePng(rgb, 13, 7, PNG_FORMAT_RGB)).pixels, rgb);
  const auto rgba = Pattern(13, 7, 4);
  const RgbImage dropped = Decode(EncodePng(rgba, 13, 7, PNG_FORMAT_RGBA));
  for (size_t i = 0; i < 13 * 7; ++i) {
    ASSERT_EQ(dropped.pixels[i * 3], rgba[i * 4]);  // alpha dropped, colour kept as is
    ASSERT_EQ(dropped.pixels[i * 3 + 2], rgba[i * 4 + 2]);
  }
  const auto grey = Pattern(13, 7, 1);
  const RgbImage out = Decode(EncodePng(grey, 13, 7, PNG_FORMAT_GRAY));
  for (size_t i = 0; i < 13 * 7; ++i) ASSERT_EQ(out.pixels[i * 3 + 1], grey[i]);
}

TEST(ImageDecodeTest, BadFilesAreRefusedWithWhatWasWrong) {
  EXPECT_THAT(DecodeError(""), HasSubstr("empty file (0 bytes)"));
  EXPECT_THAT(DecodeError("hello, not an image"), HasSubstr("not a JPEG or PNG file"));
  const std::string jpeg = testing::RgbJpeg(64, 64);
  EXPECT_THAT(DecodeError(jpeg.substr(0, jpeg.size() / 2)), HasSubstr("corrupt or truncated JPEG"));
  EXPECT_THAT(DecodeError(jpeg.substr(0, 20)), HasSubstr("corrupt or truncated JPEG header"));
  std::string png = EncodePng(Pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB);
  std::string bad_colour = png;
  bad_colour[25] = 5;
  EXPECT_THAT(DecodeError(bad_colour), HasSubstr("PNG colour type 5 with bit depth 8"));
  EXPECT_EQ(ErrorCodeOf([&] { Decode(bad_colour); }), ErrorCode::kUnsupported);
  EXPECT_THAT(DecodeError(png.substr(0, png.size() - 20)), HasSubstr("corrupt or truncated PNG"));
}

TEST(ImageDecodeTest, CorruptedBytesGiveAnErrorOrAnImageNeverACrash) {
  // Every byte position of a small JPEG and PNG overwritten in turn (the sanitizer runs check
  // the decoders' reads and our header walks stay inside the buffer).
  const std::string files[] = {testing::WithExifOrientation(testing::RgbJpeg(24, 16), 6),
                               EncodePng(Pattern(9, 7, 3), 9, 7, PNG_FORMAT_RGB)};
  for (const std::string& file : files) {
    for (size_t at = 0; at < file.size(); at += 3) {
      std::string bad = file;
      bad[at] = static_cast<char>(bad[at] ^ 0x5A);
      try {
        const RgbImage out = Decode(bad, {}, 1u << 20);
        EXPECT_EQ(out.pixels.size(), static_cast<size_t>(out.width) * out.height * 3);
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("f: "));
      }
    }
  }
}

// The window decode against the whole image decoded at the same scale: every pixel of the
// asked window equal, for each chroma subsampling, grey, a progressive file and every DCT
// scale, on an image whose sides are not whole MCUs and windows anywhere (edges included).
TEST(ImageDecodeTest, WindowDecodeEqualsFullDecodeThenCrop) {
  const int w = 203;
  const int h = 157;
  struct Kind {
    const char* name;
    std::string file;
  };
  const auto rgb = Pattern(w, h, 3, 5);
  const Kind kinds[] = {
      {"420", EncodeJpeg(rgb, w, h, TJPF_RGB, 90, TJSAMP_420)},
      {"422", EncodeJpeg(rgb, w, h, TJPF_RGB, 90, TJSAMP_422)},
      {"444", EncodeJpeg(rgb, w, h, TJPF_RGB, 90, TJSAMP_444)},
      {"440", EncodeJpeg(rgb, w, h, TJPF_RGB, 90, TJSAMP_440)},
      {"411", EncodeJpeg(rgb, w, h, TJPF_RGB, 90, TJSAMP_411)},
      {"grey", EncodeJpeg(Pattern(w, h, 1, 5), w, h, TJPF_GRAY)},
      {"progressive 420", EncodeJpeg(rgb, w, h, TJPF_RGB, 90, TJSAMP_420, TJFLAG_PROGRESSIVE)},
  };
  Pcg32 rng(11);
  ImageDecoder decoder;
  RgbImage window;
  for (const Kind& kind : kinds) {
    const ImageHeader header = decoder.ReadHeader(Bytes(kind.file), "f", 1u << 30);
    for (const int denom : {1, 2, 4, 8}) {
      const RgbImage full = Decode(kind.file, {1, denom});
      for (int trial = 0; trial < 30; ++trial) {
        // Windows from one pixel to the whole image, a quarter of them touching an edge.
        int x0 = static_cast<int>(rng.Below(static_cast<uint64_t>(full.width)));
        int y0 = static_cast<int>(rng.Below(static_cast<uint64_t>(full.height)));
        int x1 = x0 + 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(full.width - x0)));
        int y1 = y0 + 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(full.height - y0)));
        if (trial % 4 == 1) x0 = 0;
        if (trial % 4 == 2) y1 = full.height;
        if (trial % 4 == 3) x1 = full.width;
        if (trial == 0) {
          x0 = y0 = 0;
          x1 = full.width;
          y1 = full.height;
        }
        int ox = -1;
        int oy = -1;
        decoder.DecodeWindow(Bytes(kind.file), header, {1, denom}, x0, y0, x1, y1, "f", window, ox,
                             oy);
        SCOPED_TRACE(::testing::Message() << kind.name << " 1/" << denom << " window [" << x0
                                          << ", " << x1 << ") x [" << y0 << ", " << y1 << ")");
        ASSERT_LE(ox, x0);
        ASSERT_LE(oy, y0);
        ASSERT_GE(ox + window.width, x1);
        ASSERT_GE(oy + window.height, y1);
        ASSERT_LE(ox + window.width, full.width);
        ASSERT_LE(oy + window.height, full.height);
        ASSERT_EQ(window.pixels.size(), static_cast<size_t>(window.width) * window.height * 3);
        for (int y = y0; y < y1; ++y) {
          const uint8_t* want = &full.pixels[(static_cast<size_t>(y) * full.width + x0) * 3];
          const uint8_t* got =
              &window.pixels[(static_cast<size_t>(y - oy) * window.width + (x0 - ox)) * 3];
          ASSERT_EQ(std::memcmp(want, got, static_cast<size_t>(x1 - x0) * 3), 0) << "row " << y;
        }
      }
    }
  }
}

TEST(ImageDecodeTest, WindowDecodeRefusesATruncatedFileWhereverTheWindowIs) {
  const std::string jpeg = testing::RgbJpeg(64, 96);
  const auto window_error = [](const std::string& file, int denom) -> std::string {
    ImageDecoder decoder;
    try {
      const ImageHeader header = decoder.ReadHeader(Bytes(file), "f", 1u << 30);
      RgbImage out;
      int ox = 0;
      int oy = 0;
      // The top rows only: the data the window needs is all there.
      decoder.DecodeWindow(Bytes(file), header, {1, denom}, 0, 0, 8 / denom + 1, 8 / denom + 1, "f",
                           out, ox, oy);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  for (const int denom : {1, 8}) {
    EXPECT_THAT(window_error(jpeg.substr(0, jpeg.size() * 3 / 4), denom),
                HasSubstr("corrupt or truncated JPEG"));
    EXPECT_EQ(window_error(jpeg, denom), "no error");
    // Bytes after the end of image (some cameras write them) are no truncation.
    EXPECT_EQ(window_error(jpeg + std::string(100, '\0'), denom), "no error");
  }
  // And a decoder that refused one file decodes the next.
  ImageDecoder decoder;
  const std::string bad = jpeg.substr(0, jpeg.size() / 2);
  RgbImage out;
  int ox = 0;
  int oy = 0;
  EXPECT_THROW(decoder.DecodeWindow(Bytes(bad), decoder.ReadHeader(Bytes(bad), "f", 1u << 30),
                                    {1, 1}, 0, 0, 64, 96, "f", out, ox, oy),
               Error);
  decoder.DecodeWindow(Bytes(jpeg), decoder.ReadHeader(Bytes(jpeg), "f", 1u << 30), {1, 1}, 0, 0,
                       64, 96, "f", out, ox, oy);
  int w = 0;
  int h = 0;
  EXPECT_EQ(out.pixels, testing::TurboDecode(jpeg, w, h));
}

TEST(ImageDecodeTest, DecompressionBombsAreRefusedBeforeAllocating) {
  // A JPEG whose frame header claims 65500 x 65500 (the format's 16-bit limit), and a PNG
  // claiming 100000 x 100000: refused from the header, with the limit to raise.
  std::string jpeg = testing::RgbJpeg(16, 16);
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = jpeg[sof + 7] = static_cast<char>(0xFF);
  jpeg[sof + 6] = jpeg[sof + 8] = static_cast<char>(0xDC);
  EXPECT_THAT(DecodeError(jpeg, 178956970), HasSubstr("claims 65500x65500 = 4290250000 pixels, "
                                                      "over max_pixels = 178956970"));
  EXPECT_EQ(ErrorCodeOf([&] { Decode(jpeg, {}, 178956970); }), ErrorCode::kInvalidArgument);
  std::string png = EncodePng(Pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB);
  const char big[4] = {0, 0x01, static_cast<char>(0x86), static_cast<char>(0xA0)};  // 100000
  png.replace(16, 4, big, 4);
  png.replace(20, 4, big, 4);
  EXPECT_THAT(DecodeError(png, 178956970), HasSubstr("raise max_pixels"));
  // The limit is the user's: a small one refuses an ordinary image.
  EXPECT_THAT(DecodeError(testing::RgbJpeg(16, 16), 100), HasSubstr("16x16 = 256 pixels"));
}

TEST(ImageResampleTest, SameSizeIsTheIdentityAndSolidStaysSolid) {
  RgbImage in{10, 6, Pattern(10, 6, 3)};
  RgbImage out;
  ResampleScratch scratch;
  ResampleToRgb(View(in), {0, 0, 10, 6}, {10, 6, 0, 0, 10, 6}, out, scratch);
  EXPECT_EQ(out.pixels, in.pixels);
  RgbImage solid{37, 23, std::vector<uint8_t>(37 * 23 * 3, 77)};
  ResampleToRgb(View(solid), {3, 2, 30, 20}, {9, 7, 0, 0, 9, 7}, out, scratch);
  for (uint8_t v : out.pixels) ASSERT_EQ(v, 77);
}

TEST(ImageResampleTest, SameSizeWindowOfAnOffsetRegionIsItsPixelsChannelsFirst) {
  // A center crop of an image already at the resize size: the region (an integer offset into
  // the image) is as large as the full output, so each output pixel is its input pixel.
  RgbImage in{30, 20, Pattern(30, 20, 3)};
  ResampleScratch scratch;
  const int w = 9, h = 7, left = 4, top = 3, rx = 5, ry = 2;
  for (const bool flip : {false, true}) {
    std::vector<uint8_t> chw(static_cast<size_t>(3 * w * h));
    ResampleToChw(View(in), {rx, ry, rx + 20.0, ry + 15.0}, {20, 15, left, top, w, h}, flip,
                  chw.data(), scratch);
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          const int sx = rx + left + (flip ? w - 1 - x : x);
          const int sy = ry + top + y;
          ASSERT_EQ(chw[static_cast<size_t>((c * h + y) * w + x)],
                    in.pixels[static_cast<size_t>((sy * 30 + sx) * 3 + c)])
              << "flip " << flip << " c " << c << " y " << y << " x " << x;
        }
      }
    }
  }
}

TEST(ImageResampleTest, HalvingAveragesPairsAndCropKeepsTapsInside) {
  // Columns alternate 0 and 200: halving averages them (antialiasing), where a filter
  // without support scaling would pick 0 or 200.
  RgbImage in{8, 2, std::vector<uint8_t>(8 * 2 * 3)};
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 8; ++x) {
      for (int c = 0; c < 3; ++c) in.pixels[(y * 8 + x) * 3 + c] = x % 2 ? 200 : 0;
    }
  }
  RgbImage out;
  ResampleScratch scratch;
  ResampleToRgb(View(in), {0, 0, 8, 2}, {4, 2, 0, 0, 4, 2}, out, scratch);
  // PIL's triangle at scale 2 spans 4 inputs (weights 1/4, 3/4, 3/4, 1/4): inside, the pairs
  // average to 100; at the edges the taps are clipped (0, 200, 0 -> 86; 200, 0, 200 -> 114).
  const uint8_t expected[4] = {86, 100, 100, 114};
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 4; ++x) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(out.pixels[(y * 4 + x) * 3 + c], expected[x]);
    }
  }
  // A one-column region of a 200 column is 200 however far the filter reaches.
  ResampleToRgb(View(in), {1, 0, 2, 2}, {1, 1, 0, 0, 1, 1}, out, scratch);
  EXPECT_EQ(out.pixels[0], 200);
}

TEST(ImageCropTest, RandomResizedCropFollowsTorchvisionsRules) {
  Pcg32 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const CropRect r = RandomResizedCropRect(500, 375, {}, rng);
    ASSERT_GT(r.width, 0);
    ASSERT_LE(r.x + r.width, 500);
    ASSERT_LE(r.y + r.height, 375);
    const double area = static_cast<double>(r.width) * r.height / (500.0 * 375.0);
    ASSERT_GE(area, 0.08 * 0.9);
  }
  // No try can fit a 3/4..4/3 crop of most of a 1000 x 10 strip: the fallback is the centre
  // crop clamped to ratio 4/3: height 10, width round(10 * 4/3) = 13.
  Pcg32 strip(1);
  const CropRect c = RandomResizedCropRect(1000, 10, {0.9, 1.0, 3.0 / 4, 4.0 / 3}, strip);
  EXPECT_EQ(c.height, 10);
  EXPECT_EQ(c.width, 13);
  EXPECT_EQ(c.x, (1000 - 13) / 2);
}

TEST(ImageCropTest, DctScaleKeepsTheRegionAtLeastTheOutput) {
  const auto factor = [](DctScale s) { return static_cast<double>(s.num) / s.denom; };
  EXPECT_EQ(factor(DctScaleFor(2000, 1800, 224, 224)), 1.0 / 8);
  EXPECT_EQ(factor(DctScaleFor(1792, 1792, 224, 224)), 1.0 / 8);
  EXPECT_EQ(factor(DctScaleFor(1791, 1792, 224, 224)), 1.0 / 4);
  EXPECT_EQ(factor(DctScaleFor(500, 375, 224, 224)), 1.0);
  EXPECT_EQ(factor(DctScaleFor(448, 448, 224, 224)), 4.0 / 8);
  EXPECT_EQ(factor(DctScaleFor(300, 223, 224, 224)), 1.0);
  int w = 0;
  int h = 0;
  ResizedSize(500, 375, 256, w, h);
  EXPECT_EQ(w, 341);
  EXPECT_EQ(h, 256);
}

}  // namespace
}  // namespace gpufeed
