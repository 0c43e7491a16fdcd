// Decoding one JPEG or PNG file into 8-bit RGB: libjpeg-turbo (its TurboJPEG API with the DCT
// scaling factors, and libjpeg's for headers and windows) and libpng. Grey, palette and CMYK
// images come out as RGB; alpha is dropped (as PIL's convert("RGB") does); PNG samples are
// the stored values (no gamma conversion, as PIL and torchvision). Every size read from a file
// is checked (against `max_pixels`, and a PNG's chunk lengths against the bytes left in the
// file) before anything is allocated. After any failure the decoder's libjpeg state is
// replaced, so one bad file never affects the next.
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
  int orientation = 1;  // EXIF orientation 1..8 (1: as stored): JPEG APP1, PNG eXIf
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
// is none) in the first APP1 "Exif" segment, whether an Adobe APP14 segment is present, and
// the first frame header's marker (0xC0..0xCF) and sample precision (0 when none was found).
// Bytes between segments that are not a marker are skipped, as libjpeg and PIL skip them.
// Every length is checked against the buffer; at most a few hundred segments are walked.
struct JpegMarkers {
  int orientation = 1;
  bool adobe = false;
  int frame_marker = 0;
  int precision = 0;
};
JpegMarkers ReadJpegMarkers(std::span<const uint8_t> bytes);

// The EXIF orientation (1..8; 1 when absent or unreadable) of a TIFF structure (an EXIF
// block after its "Exif\0\0" prefix).
int ExifOrientation(const uint8_t* tiff, size_t size);

// The size of an image after its EXIF orientation (5..8 swap width and height).
inline bool SwapsAxes(int orientation) { return orientation >= 5 && orientation <= 8; }

// Applies an EXIF orientation to `image` (rotations and mirrors), using `scratch`.
void ApplyOrientation(int orientation, RgbImage& image, RgbImage& scratch);

// Shared by the decoders: throws Error(kCorruptData) "path: what".
[[noreturn]] void CorruptImage(const std::string& path, const std::string& what);
// Refuses a header's width x height: zero (corrupt) or over `max_pixels` (kInvalidArgument).
void CheckImagePixels(const std::string& path, const char* format, uint64_t width, uint64_t height,
                      uint64_t max_pixels);

// PNG (png.cc). ReadPngHeader walks the whole chunk list first: every chunk must fit in the
// file (a chunk that claims more bytes than are left is refused before libpng sees it), and
// an eXIf chunk gives the orientation. DecodePng reads with libpng's own API: no gamma or
// colour-profile conversion, ancillary chunks discarded unread (nothing they claim is
// allocated), 16-bit RGB(A) and grey+alpha by their high byte (PIL's "RGB;16B"), 16-bit grey
// scaled to 8 bits (PIL and torchvision clip it to 255).
ImageHeader ReadPngHeader(std::span<const uint8_t> bytes, const std::string& path,
                          uint64_t max_pixels);
void DecodePng(std::span<const uint8_t> bytes, const ImageHeader& header, const std::string& path,
               RgbImage& out);

class ImageDecoder {
 public:
  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Reads the header of `bytes` (the whole file `path`). Throws Error(kCorruptData) naming
  // `path` for an empty file, a file that is neither JPEG nor PNG, a corrupt header or a PNG
  // chunk longer than the rest of the file; Error(kUnsupported) for a PNG colour type or bit
  // depth the format does not define, and for a JPEG libjpeg-turbo does not decode (12-bit,
  // lossless, hierarchical); Error(kInvalidArgument) for an image over `max_pixels` pixels
  // ("raise max_pixels").
  ImageHeader ReadHeader(std::span<const uint8_t> bytes, const std::string& path,
                         uint64_t max_pixels);

  // Decodes `bytes` at `scale` (JPEG; PNG takes only 1/1) into `out`, as stored (the
  // orientation not applied). REQUIRES: `header` came from ReadHeader of the same bytes.
  // Throws Error(kCorruptData) naming `path` and the decoder's message for a corrupt or
  // truncated file. A JPEG libjpeg decodes with a warning (extraneous bytes before a marker,
  // and the like) is decoded as PIL decodes it; warning() then says what libjpeg said.
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

  // The first warning libjpeg gave about the file of the last ReadHeader and Decode or
  // DecodeWindow ("Corrupt JPEG data: 3 extraneous bytes before marker 0xd9"); empty if none.
  const std::string& warning() const { return warning_; }

  struct JpegState;  // a libjpeg decompressor and its error handler, reused across files

 private:
  ImageHeader ReadJpegHeader(std::span<const uint8_t> bytes, const std::string& path,
                             uint64_t max_pixels);
  void DecodeJpeg(std::span<const uint8_t> bytes, const ImageHeader& header, DctScale scale,
                  const std::string& path, RgbImage& out);
  void DecodeJpegWindow(std::span<const uint8_t> bytes, const ImageHeader& header, DctScale scale,
                        int x0, int y0, int x1, int y1, const std::string& path, RgbImage& out,
                        int& origin_x, int& origin_y);
  // Drops the libjpeg and TurboJPEG state (created again on next use): a libjpeg object
  // left by an error mid-header refuses every later file ("two SOI markers").
  void Reset();
  JpegState& Jpeg();
  void NoteWarning(const std::string& message);

  void* jpeg_ = nullptr;  // tjhandle, created on first use
  std::unique_ptr<JpegState> state_;
  std::string warning_;
  std::vector<uint8_t> cmyk_;
};

}  // namespace gpufeed
