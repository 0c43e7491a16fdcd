// Tiny test images made in the test: JPEGs through TurboJPEG (RGB, grey, CMYK, with an EXIF
// orientation spliced in), PNGs through libpng's simplified writer, and ImageFolder trees.
// Thread-safety: one test thread.
#pragma once

#include <png.h>
#include <turbojpeg.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpufeed::testing {

// A smooth, non-symmetric pattern (so flips, rotations and crops all show).
inline std::vector<uint8_t> Pattern(int width, int height, int channels, int seed = 0) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = (x * (3 + c) + y * (5 + 2 * c) + seed * 37 + ((x / 7 + y / 5) % 3) * 40);
        pixels[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v & 255);
      }
    }
  }
  return pixels;
}

// A JPEG of `pixels` in TurboJPEG pixel format `format` (TJPF_RGB, TJPF_GRAY, TJPF_CMYK),
// chroma `subsampling` (TJSAMP_*; -1: grey for TJPF_GRAY, else 4:2:0) and TurboJPEG `flags`
// (TJFLAG_PROGRESSIVE for a progressive file).
inline std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int width, int height,
                              int format = TJPF_RGB, int quality = 90, int subsampling = -1,
                              int flags = 0) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (subsampling < 0) subsampling = format == TJPF_GRAY ? TJSAMP_GRAY : TJSAMP_420;
  if (tjCompress2(handle, pixels.data(), width, 0, height, format, &out, &size, subsampling,
                  quality, flags) != 0) {
    tjDestroy(handle);
    throw std::runtime_error(tjGetErrorStr2(handle));
  }
  std::string bytes(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

inline std::string RgbJpeg(int width, int height, int seed = 0) {
  return EncodeJpeg(Pattern(width, height, 3, seed), width, height);
}

// `jpeg` with an EXIF APP1 segment (big-endian TIFF, IFD0 holding only Orientation) after SOI.
inline std::string WithExifOrientation(const std::string& jpeg, int orientation) {
  const uint8_t tiff[] = {'M',  'M',
                          0,    42,
                          0,    0,
                          0,    8,  // header, IFD0 at 8
                          0,    1,  // one entry
                          0x01, 0x12,
                          0,    3,
                          0,    0,
                          0,    1,  // Orientation SHORT
                          0,    static_cast<uint8_t>(orientation),
                          0,    0,  // value
                          0,    0,
                          0,    0};  // no next IFD
  std::string app1 = "Exif";
  app1.push_back('\0');
  app1.push_back('\0');
  app1.append(reinterpret_cast<const char*>(tiff), sizeof(tiff));
  const size_t length = app1.size() + 2;
  std::string segment = {'\xFF', '\xE1', static_cast<char>(length >> 8),
                         static_cast<char>(length & 255)};
  return jpeg.substr(0, 2) + segment + app1 + jpeg.substr(2);
}

// A PNG of `pixels` in libpng simplified format `format` (PNG_FORMAT_RGB, _GRAY, _RGBA, ...).
inline std::string EncodePng(const std::vector<uint8_t>& pixels, int width, int height,
                             uint32_t format) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  png_alloc_size_t size = 0;
  if (png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr) == 0) {
    throw std::runtime_error(image.message);
  }
  std::string bytes(size, '\0');
  if (png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data(), 0, nullptr) == 0) {
    throw std::runtime_error(image.message);
  }
  bytes.resize(size);
  return bytes;
}

// A PNG chunk: length, type, data and its CRC-32 (PNG's polynomial, bit by bit).
inline std::string PngChunk(const std::string& type, const std::string& data) {
  const auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  uint32_t crc = 0xffffffffu;
  for (const char c : type + data) {
    crc ^= static_cast<uint8_t>(c);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc ^ 0xffffffffu);
}

// What EncodePngRaw writes besides the pixels.
struct PngExtras {
  bool interlaced = false;
  double gamma = 0;  // a gAMA chunk with this file gamma (0: none)
  std::string exif;  // an eXIf chunk with these bytes (empty: none)
};

// A PNG written through libpng's own API: `samples` rows as PNG stores them (16-bit samples
// big-endian), bit `depth` and PNG colour type `colour` (0 grey, 2 RGB, 4 grey+alpha, 6 RGBA).
inline std::string EncodePngRaw(const std::vector<uint8_t>& samples, int width, int height,
                                int depth, int colour, const PngExtras& extras = {}) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::string out;
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), depth,
               colour, extras.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (extras.gamma > 0) png_set_gAMA(png, info, extras.gamma);
  if (!extras.exif.empty()) {
    png_set_eXIf_1(png, info, static_cast<png_uint_32>(extras.exif.size()),
                   reinterpret_cast<png_bytep>(const_cast<char*>(extras.exif.data())));
  }
  const int channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 4 ? 2 : 4;
  const size_t stride = static_cast<size_t>(width) * channels * depth / 8;
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(samples.data()) + stride * y;
  }
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// An EXIF block (big-endian TIFF, IFD0 holding only Orientation), without the "Exif\0\0"
// prefix a JPEG's APP1 segment puts before it.
inline std::string ExifTiff(int orientation) {
  const uint8_t tiff[] = {'M',  'M',  0, 42, 0, 0, 0, 8, 0, 1,
                          0x01, 0x12, 0, 3,  0, 0, 0, 1, 0, static_cast<uint8_t>(orientation),
                          0,    0,    0, 0,  0, 0};
  return std::string(reinterpret_cast<const char*>(tiff), sizeof(tiff));
}

// libjpeg-turbo's own full-size RGB decode of `jpeg`.
inline std::vector<uint8_t> TurboDecode(const std::string& jpeg, int& width, int& height) {
  tjhandle handle = tjInitDecompress();
  int subsampling = 0;
  int colorspace = 0;
  tjDecompressHeader3(handle, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(),
                      &width, &height, &subsampling, &colorspace);
  std::vector<uint8_t> out(static_cast<size_t>(width) * height * 3);
  tjDecompress2(handle, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(),
                out.data(), width, 0, height, TJPF_RGB, 0);
  tjDestroy(handle);
  return out;
}

}  // namespace gpufeed::testing
