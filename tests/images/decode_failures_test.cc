// Files a decoder refuses or decodes with a warning: after each kind of failure the same
// decoder decodes the next good file exactly; JPEGs libjpeg-turbo does not decode are refused
// naming the file; a PNG chunk longer than the file is refused before anything is allocated;
// extraneous bytes before a marker decode as PIL decodes them, with the warning kept.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <functional>
#include <span>

// After <cstdio>: jpeglib.h uses FILE and size_t without including their headers.
#include <jpeglib.h>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "images/decode.h"
#include "images/test_util.h"

namespace gpufeed {
namespace {

using testing::EncodePng;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::Pattern;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// `jpeg` with the byte at `offset` after its first SOF0 marker's 0xFF replaced by `value`
// (offset 0: the marker's second byte, 3: the sample precision).
std::string PatchSof(std::string jpeg, size_t offset, uint8_t value) {
  const size_t sof = jpeg.find("\xFF\xC0");
  if (sof == std::string::npos) throw std::runtime_error("no SOF0");
  jpeg[sof + 1 + offset] = static_cast<char>(value);
  return jpeg;
}

// `jpeg` with `junk` inserted just before the marker `marker` (its first occurrence at or
// after `from`).
std::string InsertBeforeMarker(const std::string& jpeg, uint8_t marker, const std::string& junk,
                               size_t from = 2) {
  const size_t at = jpeg.find(std::string{'\xFF', static_cast<char>(marker)}, from);
  if (at == std::string::npos) throw std::runtime_error("no such marker");
  return jpeg.substr(0, at) + junk + jpeg.substr(at);
}

// A progressive JPEG whose AC coefficients each take their own scans, per component: with
// `refine`, each is sent in three successive-approximation passes (568 scans), else in one
// (190 scans). Through libjpeg's own API.
std::string ManyScanJpeg(const std::vector<uint8_t>& rgb, int width, int height, bool refine);

// An arithmetic-coded JPEG, through libjpeg's own API.
std::string ArithmeticJpeg(const std::vector<uint8_t>& rgb, int width, int height) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): libjpeg's type
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  cinfo.arith_code = TRUE;
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb.data()) + cinfo.next_scanline * width * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  free(buffer);
  return out;
}

std::string ManyScanJpeg(const std::vector<uint8_t>& rgb, int width, int height, bool refine) {
  std::vector<jpeg_scan_info> scans;
  scans.push_back({3, {0, 1, 2, 0}, 0, 0, 0, 0});
  const int passes[3][2] = {{0, 2}, {2, 1}, {1, 0}};  // (Ah, Al)
  for (int c = 0; c < 3; ++c) {
    for (int pass = 0; pass < (refine ? 3 : 1); ++pass) {
      for (int k = 1; k < 64; ++k) {
        scans.push_back(
            {1, {c, 0, 0, 0}, k, k, refine ? passes[pass][0] : 0, refine ? passes[pass][1] : 0});
      }
    }
  }
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): libjpeg's type
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  cinfo.scan_info = scans.data();
  cinfo.num_scans = static_cast<int>(scans.size());
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb.data()) + cinfo.next_scanline * width * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  free(buffer);
  return out;
}

RgbImage DecodeWith(ImageDecoder& decoder, const std::string& file, bool window = false,
                    uint64_t max_pixels = 1u << 30) {
  const ImageHeader header = decoder.ReadHeader(Bytes(file), "f.jpg", max_pixels);
  RgbImage out;
  if (window) {
    int ox = 0;
    int oy = 0;
    decoder.DecodeWindow(Bytes(file), header, {1, 1}, 0, 0, header.width, header.height, "f.jpg",
                         out, ox, oy);
  } else {
    decoder.Decode(Bytes(file), header, {}, "f.jpg", out);
  }
  return out;
}

std::string ErrorOf(const std::function<void()>& f, ErrorCode* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code != nullptr) *code = e.code();
    return e.what();
  }
  return "no error";
}

TEST(ImageDecodeFailureTest, EveryFailureLeavesTheDecoderReadyForTheNextFile) {
  const std::string good_jpeg = testing::RgbJpeg(40, 24, 3);
  const auto rgb = Pattern(11, 9, 3);
  const std::string good_png = EncodePng(rgb, 11, 9, PNG_FORMAT_RGB);
  int w = 0;
  int h = 0;
  const auto expected = testing::TurboDecode(good_jpeg, w, h);
  std::string bad_dqt = good_jpeg;  // a quantization table numbered 7: libjpeg stops mid-header
  bad_dqt[bad_dqt.find("\xFF\xDB") + 4] = 7;
  std::string bad_png = good_png;
  bad_png[40] = static_cast<char>(bad_png[40] ^ 0x55);
  const struct {
    const char* name;
    std::string file;
    uint64_t max_pixels;
  } failures[] = {
      {"12-bit", PatchSof(good_jpeg, 3, 12), 1u << 30},
      {"lossless", PatchSof(good_jpeg, 0, 0xC3), 1u << 30},
      {"hierarchical", PatchSof(good_jpeg, 0, 0xC5), 1u << 30},
      {"bad DQT", bad_dqt, 1u << 30},
      {"truncated header", good_jpeg.substr(0, 30), 1u << 30},
      {"truncated scan", good_jpeg.substr(0, good_jpeg.size() / 2), 1u << 30},
      {"garbage", "\xFF\xD8\xFF garbage garbage garbage", 1u << 30},
      {"not an image", "hello", 1u << 30},
      {"bad PNG", bad_png, 1u << 30},
      {"truncated PNG", good_png.substr(0, good_png.size() - 20), 1u << 30},
      {"oversize JPEG", good_jpeg, 100},
      {"oversize PNG", good_png, 10},
  };
  for (const bool window : {false, true}) {
    ImageDecoder decoder;
    for (const auto& failure : failures) {
      SCOPED_TRACE(::testing::Message() << failure.name << (window ? " (window)" : ""));
      EXPECT_THROW(DecodeWith(decoder, failure.file, window, failure.max_pixels), Error);
      EXPECT_EQ(DecodeWith(decoder, good_jpeg, window).pixels, expected);
      EXPECT_EQ(DecodeWith(decoder, good_png, window).pixels, rgb);
    }
  }
}

TEST(ImageDecodeFailureTest, JpegsLibjpegTurboCannotDecodeAreRefusedNamingTheFile) {
  const std::string jpeg = testing::RgbJpeg(16, 16);
  ImageDecoder decoder;
  ErrorCode code{};
  EXPECT_THAT(ErrorOf([&] { DecodeWith(decoder, PatchSof(jpeg, 3, 12)); }, &code),
              HasSubstr("f.jpg: 12-bit JPEG (sample precision 12)"));
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_THAT(ErrorOf([&] { DecodeWith(decoder, PatchSof(jpeg, 0, 0xC3)); }, &code),
              HasSubstr("f.jpg: lossless JPEG (frame marker 0xc3)"));
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_THAT(ErrorOf([&] { DecodeWith(decoder, PatchSof(jpeg, 0, 0xC6)); }, &code),
              HasSubstr("f.jpg: hierarchical JPEG"));
  // Progressive and arithmetic-coded files are decoded.
  const auto rgb = Pattern(33, 17, 3);
  const std::string progressive =
      testing::EncodeJpeg(rgb, 33, 17, TJPF_RGB, 90, TJSAMP_420, TJFLAG_PROGRESSIVE);
  int w = 0;
  int h = 0;
  EXPECT_EQ(DecodeWith(decoder, progressive).pixels, testing::TurboDecode(progressive, w, h));
  const std::string arithmetic = ArithmeticJpeg(rgb, 33, 17);
  ASSERT_NE(arithmetic.find("\xFF\xC9"), std::string::npos);  // SOF9: arithmetic coding
  const RgbImage out = DecodeWith(decoder, arithmetic);
  EXPECT_EQ(out.pixels, testing::TurboDecode(arithmetic, w, h));
  EXPECT_EQ(DecodeWith(decoder, arithmetic, true).pixels, out.pixels);
}

TEST(ImageDecodeFailureTest, ProgressiveJpegsWithMoreThan500ScansAreRefused) {
  const auto rgb = Pattern(24, 16, 3);
  const std::string many = ManyScanJpeg(rgb, 24, 16, true);
  const std::string fewer = ManyScanJpeg(rgb, 24, 16, false);
  int w = 0;
  int h = 0;
  for (const bool window : {false, true}) {
    SCOPED_TRACE(window);
    ImageDecoder decoder;
    EXPECT_THAT(ErrorOf([&] { DecodeWith(decoder, many, window); }),
                HasSubstr("f.jpg: corrupt or truncated JPEG: Progressive JPEG image has more "
                          "than 500 scans"));
    EXPECT_EQ(DecodeWith(decoder, fewer, window).pixels, testing::TurboDecode(fewer, w, h));
  }
}

long PeakRssKb() {  // NOLINT(runtime/int): getrusage's type
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(ImageDecodeFailureTest, APngChunkLongerThanTheFileIsRefusedBeforeAllocating) {
  // 57 bytes: signature, IHDR, a tEXt chunk claiming 2 GB with no data, IEND.
  const std::string ihdr = EncodePng(Pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB).substr(0, 33);
  std::string bomb = ihdr + std::string("\x7f\xff\xff\x00tEXt", 8) + std::string(4, '\0') +
                     testing::PngChunk("IEND", "");
  ASSERT_EQ(bomb.size(), 57u);
  for (const char* type : {"tEXt", "zTXt", "iCCP", "IDAT", "abCd"}) {
    bomb.replace(37, 4, type);
    SCOPED_TRACE(type);
    const long before = PeakRssKb();  // NOLINT(runtime/int)
    ImageDecoder decoder;
    ErrorCode code{};
    const std::string message = ErrorOf([&] { DecodeWith(decoder, bomb); }, &code);
    EXPECT_THAT(message, HasSubstr(fmt::format("f.jpg: corrupt or truncated PNG: chunk '{}' at "
                                               "byte 33 claims 2147483392 bytes, the file has 12 "
                                               "left",
                                               type)));
    EXPECT_EQ(code, ErrorCode::kCorruptData);
    EXPECT_LT(PeakRssKb() - before, 64 * 1024);  // the peak grew by less than 64 MB
  }
}

TEST(ImageDecodeFailureTest, ExtraneousBytesBeforeAMarkerDecodeWithAWarning) {
  const std::string jpeg = testing::RgbJpeg(48, 32, 9);
  int w = 0;
  int h = 0;
  const auto expected = testing::TurboDecode(jpeg, w, h);
  const std::string junk("\x01\x02\x03", 3);
  // Before the quantization tables (in the header) and before the end of image (after the
  // scan), as cameras and editors write them.
  for (const uint8_t marker : {0xDB, 0xD9}) {
    const std::string file = InsertBeforeMarker(jpeg, marker, junk);
    for (const bool window : {false, true}) {
      SCOPED_TRACE(::testing::Message() << std::hex << int{marker} << (window ? " window" : ""));
      ImageDecoder decoder;
      EXPECT_EQ(DecodeWith(decoder, file, window).pixels, expected);
      // A window decode stops at its last row: it never reads up to the end of the image.
      if (!window || marker == 0xDB) {
        EXPECT_THAT(decoder.warning(), HasSubstr("extraneous bytes before marker 0x"));
      }
      EXPECT_EQ(DecodeWith(decoder, jpeg, window).pixels, expected);
      EXPECT_EQ(decoder.warning(), "");  // cleared for the next file
    }
  }
  // A truncated file is still an error, not a warning.
  ImageDecoder decoder;
  EXPECT_THAT(ErrorOf([&] { DecodeWith(decoder, jpeg.substr(0, jpeg.size() - 40)); }),
              HasSubstr("corrupt or truncated JPEG"));
}

}  // namespace
}  // namespace gpufeed
