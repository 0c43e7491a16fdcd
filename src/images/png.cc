// PNG: the chunk list checked against the file before libpng reads it, then libpng's own
// (non-simplified) API with only the transformations PIL's convert("RGB") makes. The
// simplified API was not used: it converts gAMA to sRGB (PIL and torchvision return the
// stored values) and reads 16-bit interlaced RGB(A) wrongly.
#include <fmt/format.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "images/decode.h"

namespace gpufeed {
namespace {

constexpr uint32_t kMaxChunkLength = 0x7fffffffu;  // PNG's limit on a chunk's length
// What libpng may allocate for one chunk: only PLTE and tRNS are read (at most 768 bytes).
constexpr png_alloc_size_t kChunkMallocMax = 1 << 16;

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string ChunkName(const uint8_t* type) {
  std::string name;
  for (int i = 0; i < 4; ++i) {
    const bool letter = (type[i] >= 'A' && type[i] <= 'Z') || (type[i] >= 'a' && type[i] <= 'z');
    name += letter ? std::string(1, static_cast<char>(type[i])) : fmt::format("\\x{:02x}", type[i]);
  }
  return name;
}

// The eXIf chunk is a TIFF structure; some writers keep JPEG's "Exif\0\0" prefix.
int PngExifOrientation(const uint8_t* body, size_t size) {
  if (size >= 6 && std::memcmp(body, "Exif\0\0", 6) == 0)
    return ExifOrientation(body + 6, size - 6);
  return ExifOrientation(body, size);
}

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t at;
};

struct PngErrors {
  std::jmp_buf jump;
  char message[256];
};

void ReadFromMemory(png_structp png, png_bytep out, size_t count) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (count > source->size - source->at) png_error(png, "read beyond the end of the file");
  std::memcpy(out, source->data + source->at, count);
  source->at += count;
}

void PngErrorExit(png_structp png, png_const_charp message) {
  auto* errors = static_cast<PngErrors*>(png_get_error_ptr(png));
  std::snprintf(errors->message, sizeof(errors->message), "%s", message);
  std::longjmp(errors->jump, 1);
}

void PngIgnoreWarning(png_structp, png_const_charp) {}

// Reads the image into `rows` (height rows of width * 3 bytes). Returns false with the message
// in `errors` on a libpng error. Plain data only in this frame: longjmp lands here.
bool ReadPngRows(png_structp png, png_infop info, PngErrors* errors, PngSource* source,
                 png_uint_32 width, png_uint_32 height, png_bytepp rows) {
  if (setjmp(errors->jump) != 0) return false;
  png_set_read_fn(png, source, ReadFromMemory);
  // Every ancillary chunk (text, ICC profiles, gamma, eXIf...) is skipped unread: nothing
  // they claim is allocated or decompressed. tRNS too: alpha is dropped anyway.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  static constexpr png_byte kTrns[5] = {'t', 'R', 'N', 'S', '\0'};
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kTrns, 1);
  png_set_chunk_malloc_max(png, kChunkMallocMax);
  png_read_info(png, info);
  if (png_get_image_width(png, info) != width || png_get_image_height(png, info) != height) {
    png_error(png, "header changed between reads");
  }
  const int depth = png_get_bit_depth(png, info);
  const int colour = png_get_color_type(png, info);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) {
    // PIL reads 16-bit RGB, RGBA and LA by their high byte; 16-bit grey becomes its "I;16"
    // mode, which convert("RGB") clips at 255: gpufeed scales it instead (v * 255 / 65535),
    // so that a 16-bit grey image is not nearly all white.
    if (colour == PNG_COLOR_TYPE_GRAY) {
      png_set_scale_16(png);
    } else {
      png_set_strip_16(png);
    }
  }
  if ((colour & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
  if (colour == PNG_COLOR_TYPE_GRAY || colour == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) {
    png_error(png, "unexpected row size after conversion to RGB");
  }
  png_read_image(png, rows);
  return true;
}

}  // namespace

ImageHeader ReadPngHeader(std::span<const uint8_t> bytes, const std::string& path,
                          uint64_t max_pixels) {
  ImageHeader header;
  header.format = ImageFormat::kPng;
  // IHDR comes first: length, "IHDR", width, height, bit depth, colour type.
  if (bytes.size() < 33 || Be32(bytes.data() + 8) != 13 ||
      std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
    CorruptImage(path, "PNG without an IHDR chunk first (truncated or corrupt)");
  }
  const uint32_t width = Be32(bytes.data() + 16);
  const uint32_t height = Be32(bytes.data() + 20);
  const int depth = bytes[24];
  const int colour = bytes[25];
  const bool valid =
      (colour == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)) ||
      (colour == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
      ((colour == 2 || colour == 4 || colour == 6) && (depth == 8 || depth == 16));
  if (!valid) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: PNG colour type {} with bit depth {} is not one PNG defines "
                            "(grey 0, RGB 2, palette 3, grey+alpha 4, RGBA 6)",
                            path, colour, depth));
  }
  if (width > kMaxChunkLength || height > kMaxChunkLength) {
    CorruptImage(path, fmt::format("PNG header claims {}x{} pixels, past the format's limit", width,
                                   height));
  }
  CheckImagePixels(path, "PNG", width, height, max_pixels);
  header.width = static_cast<int>(width);
  header.height = static_cast<int>(height);
  // Every chunk up to IEND must lie inside the file: libpng would allocate a chunk's declared
  // length before finding that the data is not there. Linear in the file's size.
  bool exif_seen = false;
  for (size_t at = 8; at < bytes.size();) {
    if (bytes.size() - at < 12) {
      CorruptImage(path, fmt::format("corrupt or truncated PNG: {} bytes at byte {}, less than a "
                                     "chunk's 12",
                                     bytes.size() - at, at));
    }
    const uint32_t length = Be32(bytes.data() + at);
    const uint8_t* type = bytes.data() + at + 4;
    const size_t left = bytes.size() - at - 12;
    if (length > kMaxChunkLength || length > left) {
      CorruptImage(path, fmt::format("corrupt or truncated PNG: chunk '{}' at byte {} claims {} "
                                     "bytes, the file has {} left",
                                     ChunkName(type), at, length, left));
    }
    if (std::memcmp(type, "eXIf", 4) == 0 && !exif_seen) {
      exif_seen = true;
      header.orientation = PngExifOrientation(type + 4, length);
    }
    if (std::memcmp(type, "IEND", 4) == 0) break;
    at += 12 + size_t{length};
  }
  return header;
}

void DecodePng(std::span<const uint8_t> bytes, const ImageHeader& header, const std::string& path,
               RgbImage& out) {
  const auto width = static_cast<png_uint_32>(header.width);
  const auto height = static_cast<png_uint_32>(header.height);
  const size_t stride = MulOrThrow(width, 3, "PNG row");
  out.pixels.resize(MulOrThrow(stride, height, "PNG size"));
  std::vector<png_bytep> rows(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = out.pixels.data() + stride * y;
  PngErrors errors{};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &errors, PngErrorExit, PngIgnoreWarning);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw Error(ErrorCode::kIo, fmt::format("{}: libpng could not start (out of memory)", path));
  }
  PngSource source{bytes.data(), bytes.size(), 0};
  const bool ok = ReadPngRows(png, info, &errors, &source, width, height, rows.data());
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) CorruptImage(path, fmt::format("corrupt or truncated PNG: {}", errors.message));
  out.width = header.width;
  out.height = header.height;
}

}  // namespace gpufeed
