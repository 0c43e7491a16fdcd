// Fuzzes the image decoders (images/decode.h): a file's header, its whole decode at a
// DCT scale, and the window decode the streaming source uses for a random crop (libjpeg's
// jpeg_crop_scanline and jpeg_skip_scanlines), then the orientation and the resampling of
// what came out. Any input must decode or throw gpufeed::Error, never crash or read out of
// bounds, and must leave the decoder (kept across inputs, as a loader worker keeps it) able
// to decode a good file exactly as before.
//
// Input: byte 0 picks the DCT scale (low 2 bits) and the EXIF orientation applied (next 3),
// bytes 1-4 the window (each a fraction in 1/255 of the scaled image), the rest is the file.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "images/decode.h"
#include "images/resample.h"

namespace {

// An 8x8 grey JPEG (PIL, quality 50): decoded after every input by the same decoder.
constexpr uint8_t kGoodJpeg[] = {
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x10, 0x0b, 0x0c, 0x0e, 0x0c, 0x0a, 0x10,
    0x0e, 0x0d, 0x0e, 0x12, 0x11, 0x10, 0x13, 0x18, 0x28, 0x1a, 0x18, 0x16, 0x16, 0x18, 0x31, 0x23,
    0x25, 0x1d, 0x28, 0x3a, 0x33, 0x3d, 0x3c, 0x39, 0x33, 0x38, 0x37, 0x40, 0x48, 0x5c, 0x4e, 0x40,
    0x44, 0x57, 0x45, 0x37, 0x38, 0x50, 0x6d, 0x51, 0x57, 0x5f, 0x62, 0x67, 0x68, 0x67, 0x3e, 0x4d,
    0x71, 0x79, 0x70, 0x64, 0x78, 0x5c, 0x65, 0x67, 0x63, 0xff, 0xc0, 0x00, 0x0b, 0x08, 0x00, 0x08,
    0x00, 0x08, 0x01, 0x01, 0x11, 0x00, 0xff, 0xc4, 0x00, 0x14, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xc4, 0x00, 0x18,
    0x10, 0x00, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x03, 0x06, 0x63, 0xa1, 0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00,
    0x11, 0x0e, 0xaf, 0x0f, 0xff, 0xd9,
};

void CheckDecoderStillGood(gpufeed::ImageDecoder& decoder) {
  static const std::vector<uint8_t> expected = [] {
    gpufeed::ImageDecoder fresh;
    gpufeed::RgbImage out;
    fresh.Decode(kGoodJpeg, fresh.ReadHeader(kGoodJpeg, "good.jpg", 64), {1, 1}, "good.jpg", out);
    return out.pixels;
  }();
  gpufeed::RgbImage out;
  try {
    decoder.Decode(kGoodJpeg, decoder.ReadHeader(kGoodJpeg, "good.jpg", 64), {1, 1}, "good.jpg",
                   out);
  } catch (const gpufeed::Error&) {
    __builtin_trap();  // a bad file left the decoder unable to decode the next one
  }
  if (out.pixels != expected) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpufeed::ImageDecoder decoder;
  if (size < 5) return 0;
  const int denom = 1 << (data[0] & 3);
  const int orientation = 1 + ((data[0] >> 2) & 7);
  const std::span<const uint8_t> file(data + 5, size - 5);
  const std::string path = "fuzz.jpg";
  gpufeed::RgbImage image;
  gpufeed::RgbImage scratch;
  gpufeed::ResampleScratch resample;
  try {
    // At most 2^20 pixels: the fuzzer looks for memory errors, not for slow large images.
    const gpufeed::ImageHeader header = decoder.ReadHeader(file, path, 1u << 20);
    const gpufeed::DctScale scale{1, header.format == gpufeed::ImageFormat::kJpeg ? denom : 1};
    const int w = scale.Apply(header.width);
    const int h = scale.Apply(header.height);
    int x0 = w * data[1] / 256;
    int y0 = h * data[2] / 256;
    const int x1 = x0 + 1 + (w - x0 - 1) * data[3] / 255;
    const int y1 = y0 + 1 + (h - y0 - 1) * data[4] / 255;
    int ox = 0;
    int oy = 0;
    decoder.DecodeWindow(file, header, scale, x0, y0, x1, y1, path, image, ox, oy);
    if (ox > x0 || oy > y0 || ox + image.width < x1 || oy + image.height < y1 ||
        image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
      __builtin_trap();  // the window must hold what was asked
    }
    gpufeed::RgbImage out;
    gpufeed::ResampleToRgb(View(image),
                           {x0 - ox + 0.5, y0 - oy + 0.0, x1 - ox + 0.0, y1 - oy + 0.0},
                           {7, 5, 0, 0, 7, 5}, out, resample);
    decoder.Decode(file, header, scale, path, image);
    gpufeed::ApplyOrientation(orientation, image, scratch);
  } catch (const gpufeed::Error&) {
  }
  CheckDecoderStillGood(decoder);
  return 0;
}
