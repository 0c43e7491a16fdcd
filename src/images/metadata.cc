// What files say about how to show them: EXIF orientation (JPEG APP1, PNG eXIf) and the JPEG
// segments before the first scan; applying the orientation to decoded pixels.
#include <algorithm>
#include <cstring>

#include "images/decode.h"

namespace gpufeed {
namespace {

constexpr int kMaxSegments = 512;

}  // namespace

// EXIF's TIFF structure: orientation is tag 0x0112 (SHORT) of IFD0.
int ExifOrientation(const uint8_t* tiff, size_t size) {
  if (size < 8) return 1;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  const auto u16 = [&](size_t at) -> uint32_t {
    return little ? tiff[at] | (tiff[at + 1] << 8) : (tiff[at] << 8) | tiff[at + 1];
  };
  const auto u32 = [&](size_t at) -> uint32_t {
    return little ? u16(at) | (u16(at + 2) << 16) : (u16(at) << 16) | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > size) return 1;
  const uint32_t entries = u16(ifd);
  for (uint32_t e = 0; e < entries; ++e) {
    const uint64_t at = ifd + 2 + uint64_t{e} * 12;
    if (at + 12 > size) return 1;
    if (u16(at) == 0x0112 && u16(at + 2) == 3 && u32(at + 4) >= 1) {
      const uint32_t value = u16(at + 8);
      return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
    }
  }
  return 1;
}

JpegMarkers ReadJpegMarkers(std::span<const uint8_t> bytes) {
  JpegMarkers markers;
  bool exif_seen = false;
  size_t at = 2;  // after SOI
  for (int segment = 0; segment < kMaxSegments && at + 4 <= bytes.size(); ++segment) {
    if (bytes[at] != 0xFF) {  // extraneous bytes: libjpeg warns and looks for the next 0xFF
      const auto next = std::find(bytes.begin() + static_cast<ptrdiff_t>(at), bytes.end(), 0xFF);
      at = static_cast<size_t>(next - bytes.begin());
      continue;
    }
    const uint8_t marker = bytes[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) break;  // start of scan, end of image
    const size_t length = (size_t{bytes[at + 2]} << 8) | bytes[at + 3];
    if (length < 2 || at + 2 + length > bytes.size()) break;
    const uint8_t* body = bytes.data() + at + 4;
    const size_t body_size = length - 2;
    // Frame headers: SOF0..SOF15 less DHT (C4), JPG (C8) and DAC (CC).
    const bool frame =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (frame && markers.frame_marker == 0 && body_size >= 1) {
      markers.frame_marker = marker;
      markers.precision = body[0];
    } else if (marker == 0xE1 && !exif_seen && body_size >= 6 &&
               std::memcmp(body, "Exif\0\0", 6) == 0) {
      // The first EXIF block counts, as in PIL.
      exif_seen = true;
      markers.orientation = ExifOrientation(body + 6, body_size - 6);
    } else if (marker == 0xEE && body_size >= 5 && std::memcmp(body, "Adobe", 5) == 0) {
      markers.adobe = true;
    }
    at += 2 + length;
  }
  return markers;
}

void ApplyOrientation(int orientation, RgbImage& image, RgbImage& scratch) {
  if (orientation <= 1 || orientation > 8) return;
  const int w = image.width;
  const int h = image.height;
  const bool swap = SwapsAxes(orientation);
  scratch.width = swap ? h : w;
  scratch.height = swap ? w : h;
  scratch.pixels.resize(image.pixels.size());
  const int ow = scratch.width;
  // Output (x, y) of input (sx, sy), per EXIF: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
  // 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise.
  for (int sy = 0; sy < h; ++sy) {
    const uint8_t* row = image.pixels.data() + static_cast<size_t>(sy) * w * 3;
    for (int sx = 0; sx < w; ++sx) {
      int x = sx;
      int y = sy;
      switch (orientation) {
        case 2:
          x = w - 1 - sx;
          break;
        case 3:
          x = w - 1 - sx;
          y = h - 1 - sy;
          break;
        case 4:
          y = h - 1 - sy;
          break;
        case 5:
          x = sy;
          y = sx;
          break;
        case 6:
          x = h - 1 - sy;
          y = sx;
          break;
        case 7:
          x = h - 1 - sy;
          y = w - 1 - sx;
          break;
        case 8:
          x = sy;
          y = w - 1 - sx;
          break;
        default:
          break;
      }
      std::memcpy(scratch.pixels.data() + (static_cast<size_t>(y) * ow + x) * 3, row + sx * 3, 3);
    }
  }
  std::swap(image, scratch);
}

}  // namespace gpufeed
