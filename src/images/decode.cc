// The decoder's entry points: which format a file is, and the one rule every decoder
// follows: after any failure the libjpeg state is dropped and created again on next use.
#include "images/decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool StartsWith(std::span<const uint8_t> bytes, const char* magic, size_t at = 0) {
  const size_t n = std::strlen(magic);
  return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
}

// The formats an image folder may hold (torchvision lists them) that gpufeed does not decode.
const char* OtherImageFormat(std::span<const uint8_t> bytes) {
  if (StartsWith(bytes, "BM")) return "a BMP file";
  constexpr uint8_t kTiffBig[4] = {'M', 'M', 0, 42};
  if (StartsWith(bytes, "II*") ||
      (bytes.size() >= 4 && std::memcmp(bytes.data(), kTiffBig, 4) == 0)) {
    return "a TIFF file";
  }
  if (StartsWith(bytes, "RIFF") && StartsWith(bytes, "WEBP", 8)) return "a WebP file";
  if (StartsWith(bytes, "GIF8")) return "a GIF file";
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '7') {
    return "a PNM (PPM, PGM or PBM) file";
  }
  return nullptr;
}

[[noreturn]] void RefuseFormat(std::span<const uint8_t> bytes, const std::string& path) {
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    head += fmt::format("{}{:02x}", i == 0 ? "" : " ", bytes[i]);
  }
  const char* other = OtherImageFormat(bytes);
  throw Error(ErrorCode::kCorruptData,
              fmt::format("{}: not a JPEG or PNG file ({}starts with {}); gpufeed decodes JPEG "
                          "and PNG",
                          path, other != nullptr ? std::string(other) + ", " : "", head));
}

}  // namespace

void CorruptImage(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kCorruptData, fmt::format("{}: {}", path, what));
}

void CheckImagePixels(const std::string& path, const char* format, uint64_t width, uint64_t height,
                      uint64_t max_pixels) {
  if (width == 0 || height == 0) {
    CorruptImage(path, fmt::format("{} header claims a {}x{} image", format, width, height));
  }
  if (width * height > max_pixels) {  // both < 2^32: no overflow
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} header claims {}x{} = {} pixels, over max_pixels = {} (a "
                            "decompression bomb?); raise max_pixels to decode it",
                            path, format, width, height, width * height, max_pixels));
  }
}

void ImageDecoder::NoteWarning(const std::string& message) {
  if (warning_.empty()) warning_ = message;
}

ImageHeader ImageDecoder::ReadHeader(std::span<const uint8_t> bytes, const std::string& path,
                                     uint64_t max_pixels) {
  warning_.clear();
  if (bytes.empty()) CorruptImage(path, "empty file (0 bytes), not an image");
  try {
    if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
      return ReadJpegHeader(bytes, path, max_pixels);
    }
  } catch (...) {
    Reset();
    throw;
  }
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) {
    return ReadPngHeader(bytes, path, max_pixels);
  }
  RefuseFormat(bytes, path);
}

void ImageDecoder::Decode(std::span<const uint8_t> bytes, const ImageHeader& header, DctScale scale,
                          const std::string& path, RgbImage& out) {
  if (header.format == ImageFormat::kPng) {
    DecodePng(bytes, header, path, out);  // a libpng reader per file: nothing to reset
    return;
  }
  try {
    DecodeJpeg(bytes, header, scale, path, out);
  } catch (...) {
    Reset();
    throw;
  }
}

void ImageDecoder::DecodeWindow(std::span<const uint8_t> bytes, const ImageHeader& header,
                                DctScale scale, int x0, int y0, int x1, int y1,
                                const std::string& path, RgbImage& out, int& origin_x,
                                int& origin_y) {
  if (header.format != ImageFormat::kJpeg || header.cmyk || scale.num != 1) {
    Decode(bytes, header, scale, path, out);
    origin_x = 0;
    origin_y = 0;
    return;
  }
  try {
    DecodeJpegWindow(bytes, header, scale, x0, y0, x1, y1, path, out, origin_x, origin_y);
  } catch (...) {
    Reset();
    throw;
  }
}

}  // namespace gpufeed
