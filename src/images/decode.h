// Decoding one JPEG or PNG file into 8-bit RGB: libjpeg-turbo's TurboJPEG API (with its DCT
// scaling factors) and libpng's simplified API. Grey, palette and CMYK images come out as
// RGB; alpha is dropped (as PIL's convert("RGB") does). Every size read from a file is
// checked against `max_pixels` before anything is allocated.
// Thread-safety: ImageDecoder is used by one thread at a time (one per loader worker); many
// decoders work at once without a shared lock. The free functions are pure.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gpufeed {

enum class ImageFormat { kJpeg, kPng };

// An 8-bit RGB image, rows of width * 3 bytes.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

// A read-only view of RGB pixels (a decoded image, or a stored one in a cache).
struct RgbView {
  const uint8_t* pixels = nullptr;
  int width = 0;
  int height = 0;
};
inline RgbView View(const RgbImage& image) {
  return {image.pixels.data(), image.width, image.height};
}

// A file's header: its size as stored and how to show it.
struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;  // as stored, before the EXIF orientation
  int height = 0;
  int orientation = 1;  // EXIF orientation 1..8 (1: as stored); always 1 for PNG
  bool cmyk = false;    // a CMYK or YCCK JPEG
  bool adobe = false;   // a JPEG with an Adobe APP14 segment (its CMYK is stored inverted)
};

// A DCT scaling factor num/denom (1/1, 1/2, 1/4, 1/8).
struct DctScale {
  int num = 1;
  int denom = 1;
  // The size libjpeg-turbo decodes a dimension of `full` pixels to: ceil(full * num / denom).
  int Apply(int full) const { return (full * num + denom - 1) / denom; }
};

// What a JPEG's segments before the first scan say: the EXIF orientation (1..8, 1 when there
// is none) in APP1 and whether an Adobe APP14 segment is present. Every length is checked
// against the buffer; at most a few hundred segments are walked.
struct JpegMarkers {
  int orientation = 1;
  bool adobe = false;
};
JpegMarkers ReadJpegMarkers(std::span<const uint8_t> bytes);

// The size of an image after its EXIF orientation (5..8 swap width and height).
inline bool SwapsAxes(int orientation) { return orientation >= 5 && orientation <= 8; }

// Applies an EXIF orientation to `image` (rotations and mirrors), using `scratch`.
void ApplyOrientation(int orientation, RgbImage& image, RgbImage& scratch);

class ImageDecoder {
 public:
  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Reads the header of `bytes` (the whole file `path`). Throws Error(kCorruptData) naming
  // `path` for an empty file, a file that is neither JPEG nor PNG, or a corrupt header;
  // Error(kUnsupported) for a PNG colour type or bit depth the format does not define;
  // Error(kInvalidArgument) for an image over `max_pixels` pixels ("raise max_pixels").
  ImageHeader ReadHeader(std::span<const uint8_t> bytes, const std::string& path,
                         uint64_t max_pixels);

  // Decodes `bytes` at `scale` (JPEG; PNG takes only 1/1) into `out`, as stored (the
  // orientation not applied). REQUIRES: `header` came from ReadHeader of the same bytes.
  // Throws Error(kCorruptData) naming `path` and the decoder's message for a corrupt or
  // truncated file.
  void Decode(std::span<const uint8_t> bytes, const ImageHeader& header, DctScale scale,
              const std::string& path, RgbImage& out);

  // Decodes a JPEG at `scale` only as far as the window [x0, x1) x [y0, y1) of the scaled
  // image (as stored, clipped to it) needs: the rows above it skipped (entropy-decoded only),
  // the rows below it not decoded, the columns outside it not transformed (libjpeg's
  // jpeg_skip_scanlines and jpeg_crop_scanline). `out` receives a rectangle of the scaled
  // image holding the window whose pixels equal Decode's at the same scale; its top-left
  // corner in the scaled image is returned in `origin_x`, `origin_y`. A file that does not
  // end with an EOI marker is decoded to its last row, so that a truncated file is refused
  // as Decode refuses it whatever the window. PNG and CMYK files are decoded whole.
  // REQUIRES: `header` came from ReadHeader of the same bytes.
  void DecodeWindow(std::span<const uint8_t> bytes, const ImageHeader& header, DctScale scale,
                    int x0, int y0, int x1, int y1, const std::string& path, RgbImage& out,
                    int& origin_x, int& origin_y);

  struct JpegState;  // a libjpeg decompressor and its error handler, reused across files

 private:
  void* jpeg_ = nullptr;  // tjhandle, created on first use
  std::unique_ptr<JpegState> state_;
  std::vector<uint8_t> cmyk_;
};

}  // namespace gpufeed
