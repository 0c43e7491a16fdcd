// Fuzzes the image decoders (images/decode.h): a file's header, its whole decode at a
// DCT scale, and the window decode the streaming source uses for a random crop (libjpeg's
// jpeg_crop_scanline and jpeg_skip_scanlines), then the orientation and the resampling of
// what came out. Any input must decode or throw gpufeed::Error, never crash or read out of
// bounds.
//
// Input: byte 0 picks the DCT scale (low 2 bits) and the EXIF orientation applied (next 3),
// bytes 1-4 the window (each a fraction in 1/255 of the scaled image), the rest is the file.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gpufeed/error.h"
#include "images/decode.h"
#include "images/resample.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const int denom = 1 << (data[0] & 3);
  const int orientation = 1 + ((data[0] >> 2) & 7);
  const std::span<const uint8_t> file(data + 5, size - 5);
  const std::string path = "fuzz.jpg";
  gpufeed::ImageDecoder decoder;
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
  return 0;
}
