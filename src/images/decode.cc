#include "images/decode.h"

#include <fmt/format.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// After <cstdio>: jpeglib.h uses FILE and size_t without including their headers.
#include <jerror.h>
#include <jpeglib.h>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr int kMaxSegments = 512;

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

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

[[noreturn]] void Corrupt(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kCorruptData, fmt::format("{}: {}", path, what));
}

void CheckPixels(const std::string& path, const char* format, uint64_t width, uint64_t height,
                 uint64_t max_pixels) {
  if (width == 0 || height == 0) {
    Corrupt(path, fmt::format("{} header claims a {}x{} image", format, width, height));
  }
  if (width * height > max_pixels) {  // both < 2^32: no overflow
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} header claims {}x{} = {} pixels, over max_pixels = {} (a "
                            "decompression bomb?); raise max_pixels to decode it",
                            path, format, width, height, width * height, max_pixels));
  }
}

// PIL's cmyk2rgb on CMYK already un-inverted: R = (255 - K) - C * (255 - K) / 255.
uint8_t CmykChannel(int c, int nk) {
  const int t = c * nk + 128;
  return static_cast<uint8_t>(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
}

// A libjpeg error manager that longjmps back to the call that started the work instead of
// exiting, and records warnings instead of printing them.
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool premature_end;  // a "Premature end of JPEG file" warning: the data ran out
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) errors->premature_end = true;
  cinfo->err->num_warnings++;
}

// The window a DecodeWindow call asks for and, once started, what libjpeg gives.
struct JpegWindowJob {
  const uint8_t* data;
  unsigned long size;  // NOLINT(runtime/int): libjpeg's type
  int scale_denom;
  bool read_to_end;  // no EOI at the end: decode every row so that a truncation is seen
  int x0, y0, x1, y1;
  // Set by StartJpegWindow:
  int first_row;  // the scaled image's row that the first row read is
  int last_row;   // one past the last row to read
  int origin_x;
  int width;
};

// Starts decompressing the job's file: crops the columns to the window (with a margin of an
// iMCU column, so that the fancy upsampler sees the same neighbours as in a full decode) and
// skips whole iMCU rows above it (leaving one iMCU row of context). Returns false with the
// message in `errors` on a libjpeg error. Plain data only in this frame: longjmp lands here.
bool StartJpegWindow(jpeg_decompress_struct* cinfo, JpegErrors* errors, JpegWindowJob* job) {
  if (setjmp(errors->jump) != 0) return false;
  jpeg_mem_src(cinfo, job->data, job->size);
  jpeg_read_header(cinfo, TRUE);
  // TurboJPEG's defaults with no flags: the accurate integer IDCT, fancy upsampling.
  cinfo->out_color_space = JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(job->scale_denom);
  jpeg_start_decompress(cinfo);
  const int width = static_cast<int>(cinfo->output_width);
  const int height = static_cast<int>(cinfo->output_height);
  // Output pixels per iMCU column and row at this scale.
  const int block = DCTSIZE / job->scale_denom;
  const int column = block * cinfo->max_h_samp_factor;
  const int row = block * cinfo->max_v_samp_factor;
  const int x0 = std::clamp(job->x0 - column, 0, width);
  const int x1 = std::clamp(job->x1 + column, 0, width);
  JDIMENSION crop_x = static_cast<JDIMENSION>(x0);
  JDIMENSION crop_width = static_cast<JDIMENSION>(std::max(x1 - x0, 1));
  if (crop_width < static_cast<JDIMENSION>(width)) {
    jpeg_crop_scanline(cinfo, &crop_x, &crop_width);  // widens to iMCU column boundaries
  }
  job->origin_x = static_cast<int>(crop_x);
  job->width = static_cast<int>(cinfo->output_width);
  const int skip = std::max(0, (std::clamp(job->y0, 0, height) / row - 1) * row);
  job->first_row = skip > 0 ? static_cast<int>(jpeg_skip_scanlines(cinfo, skip)) : 0;
  job->last_row = job->read_to_end ? height : std::clamp(job->y1 + row, job->first_row, height);
  return true;
}

// Reads rows [first_row, last_row) into `rows` (rows of width * 3 bytes) and ends the
// decompression (the object is reusable). Returns false on a libjpeg error.
bool ReadJpegRows(jpeg_decompress_struct* cinfo, JpegErrors* errors, const JpegWindowJob* job,
                  uint8_t* rows) {
  if (setjmp(errors->jump) != 0) return false;
  const size_t stride = static_cast<size_t>(job->width) * 3;
  constexpr int kRowsPerCall = 16;  // a row group at a time (at most 2 x 8 rows), as TurboJPEG
  JSAMPROW lines[kRowsPerCall];
  for (int y = job->first_row; y < job->last_row;) {
    const int count = std::min(kRowsPerCall, job->last_row - y);
    for (int i = 0; i < count; ++i) {
      lines[i] = rows + static_cast<size_t>(y - job->first_row + i) * stride;
    }
    const JDIMENSION got = jpeg_read_scanlines(cinfo, lines, static_cast<JDIMENSION>(count));
    if (got == 0) {  // libjpeg pads a truncated file with warnings, never returns short
      (*cinfo->err->format_message)(reinterpret_cast<j_common_ptr>(cinfo), errors->message);
      return false;
    }
    y += static_cast<int>(got);
  }
  jpeg_abort_decompress(cinfo);
  return true;
}

bool EndsWithEoi(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[bytes.size() - 2] == 0xFF && bytes.back() == 0xD9;
}

}  // namespace

struct ImageDecoder::JpegState {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  JpegState() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    std::memset(&errors, 0, sizeof(errors));
    cinfo.err = jpeg_std_error(&errors.mgr);
    errors.mgr.error_exit = JpegErrorExit;
    errors.mgr.emit_message = JpegEmitMessage;
    jpeg_create_decompress(&cinfo);  // only an out-of-memory error could jump: none here
  }
  ~JpegState() { jpeg_destroy_decompress(&cinfo); }
  JpegState(const JpegState&) = delete;
  JpegState& operator=(const JpegState&) = delete;
};

JpegMarkers ReadJpegMarkers(std::span<const uint8_t> bytes) {
  JpegMarkers markers;
  size_t at = 2;  // after SOI
  for (int segment = 0; segment < kMaxSegments && at + 4 <= bytes.size(); ++segment) {
    if (bytes[at] != 0xFF) break;
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
    if (marker == 0xE1 && body_size >= 6 && std::memcmp(body, "Exif\0\0", 6) == 0) {
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

ImageDecoder::ImageDecoder() = default;

ImageDecoder::~ImageDecoder() {
  if (jpeg_ != nullptr) tjDestroy(static_cast<tjhandle>(jpeg_));
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
  if (state_ == nullptr) state_ = std::make_unique<JpegState>();
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  JpegErrors* errors = &state_->errors;
  errors->premature_end = false;
  errors->message[0] = '\0';
  JpegWindowJob job{};
  job.data = bytes.data();
  job.size = static_cast<unsigned long>(bytes.size());  // NOLINT(runtime/int)
  job.scale_denom = scale.denom;
  job.read_to_end = !EndsWithEoi(bytes);
  job.x0 = x0;
  job.y0 = y0;
  job.x1 = x1;
  job.y1 = y1;
  const auto fail = [&](const std::string& what) {
    jpeg_abort_decompress(cinfo);
    Corrupt(path, what);
  };
  if (!StartJpegWindow(cinfo, errors, &job)) {
    fail(fmt::format("corrupt or truncated JPEG: {}", errors->message));
  }
  // The header was checked by ReadHeader (max_pixels included): the same bytes give the same
  // frame, so the window is at most the image's size.
  if (static_cast<int>(cinfo->image_width) != header.width ||
      static_cast<int>(cinfo->image_height) != header.height) {
    fail("JPEG header changed between reads");
  }
  out.width = job.width;
  out.height = job.last_row - job.first_row;
  out.pixels.resize(static_cast<size_t>(out.width) * static_cast<size_t>(out.height) * 3);
  if (!ReadJpegRows(cinfo, errors, &job, out.pixels.data())) {
    fail(fmt::format("corrupt or truncated JPEG: {}", errors->message));
  }
  if (errors->premature_end) {
    Corrupt(path, "corrupt or truncated JPEG: Premature end of JPEG file");
  }
  origin_x = job.origin_x;
  origin_y = job.first_row;
}

ImageHeader ImageDecoder::ReadHeader(std::span<const uint8_t> bytes, const std::string& path,
                                     uint64_t max_pixels) {
  ImageHeader header;
  if (bytes.empty()) Corrupt(path, "empty file (0 bytes), not an image");
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    header.format = ImageFormat::kJpeg;
    if (jpeg_ == nullptr) {
      jpeg_ = tjInitDecompress();
      if (jpeg_ == nullptr) {
        throw Error(ErrorCode::kIo, fmt::format("libjpeg-turbo: {}", tjGetErrorStr2(nullptr)));
      }
    }
    int width = 0;
    int height = 0;
    int subsampling = 0;
    int colorspace = 0;
    if (tjDecompressHeader3(static_cast<tjhandle>(jpeg_), bytes.data(), bytes.size(), &width,
                            &height, &subsampling, &colorspace) != 0) {
      Corrupt(path, fmt::format("corrupt or truncated JPEG header: {}",
                                tjGetErrorStr2(static_cast<tjhandle>(jpeg_))));
    }
    if (width <= 0 || height <= 0) {  // the data ended before the frame header
      Corrupt(path, "corrupt or truncated JPEG header: no frame size before the data ends");
    }
    CheckPixels(path, "JPEG", static_cast<uint64_t>(width), static_cast<uint64_t>(height),
                max_pixels);
    header.width = width;
    header.height = height;
    header.cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    const JpegMarkers markers = ReadJpegMarkers(bytes);
    header.orientation = markers.orientation;
    header.adobe = markers.adobe;
    return header;
  }
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) {
    header.format = ImageFormat::kPng;
    // IHDR comes first: length, "IHDR", width, height, bit depth, colour type.
    if (bytes.size() < 33 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
      Corrupt(path, "PNG without an IHDR chunk first (truncated or corrupt)");
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
    if (width > 0x7fffffffu || height > 0x7fffffffu) {
      Corrupt(path, fmt::format("PNG header claims {}x{} pixels, past the format's limit", width,
                                height));
    }
    CheckPixels(path, "PNG", width, height, max_pixels);
    header.width = static_cast<int>(width);
    header.height = static_cast<int>(height);
    return header;
  }
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    head += fmt::format("{}{:02x}", i == 0 ? "" : " ", bytes[i]);
  }
  throw Error(ErrorCode::kCorruptData,
              fmt::format("{}: not a JPEG or PNG file (starts with {}); gpufeed decodes JPEG "
                          "and PNG",
                          path, head));
}

void ImageDecoder::Decode(std::span<const uint8_t> bytes, const ImageHeader& header, DctScale scale,
                          const std::string& path, RgbImage& out) {
  if (header.format == ImageFormat::kPng) {
    png_image image;
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0) {
      Corrupt(path, fmt::format("corrupt PNG: {}", image.message));
    }
    if (image.width != static_cast<png_uint_32>(header.width) ||
        image.height != static_cast<png_uint_32>(header.height)) {
      png_image_free(&image);
      Corrupt(path, "PNG header changed between reads");
    }
    // 16-bit samples are sRGB-coded like 8-bit ones (libpng would take them as linear).
    image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    image.format = PNG_FORMAT_RGBA;
    const size_t pixels = MulOrThrow(image.width, image.height, "PNG size");
    cmyk_.resize(pixels * 4);
    if (png_image_finish_read(&image, nullptr, cmyk_.data(), 0, nullptr) == 0) {
      const std::string message = image.message;
      png_image_free(&image);
      Corrupt(path, fmt::format("corrupt or truncated PNG: {}", message));
    }
    out.width = header.width;
    out.height = header.height;
    out.pixels.resize(pixels * 3);
    for (size_t i = 0; i < pixels; ++i) std::memcpy(&out.pixels[i * 3], &cmyk_[i * 4], 3);
    return;
  }

  auto* handle = static_cast<tjhandle>(jpeg_);
  GPUFEED_ASSERT(handle != nullptr, "Decode before ReadHeader");
  tjscalingfactor factor{scale.num, scale.denom};
  const int width = TJSCALED(header.width, factor);
  const int height = TJSCALED(header.height, factor);
  const size_t pixels = static_cast<size_t>(width) * static_cast<size_t>(height);
  const int pixel_format = header.cmyk ? TJPF_CMYK : TJPF_RGB;
  uint8_t* target = nullptr;
  if (header.cmyk) {
    cmyk_.resize(pixels * 4);
    target = cmyk_.data();
  } else {
    out.pixels.resize(pixels * 3);
    target = out.pixels.data();
  }
  if (tjDecompress2(handle, bytes.data(), bytes.size(), target, width, 0, height, pixel_format,
                    0) != 0) {
    const std::string message = tjGetErrorStr2(handle);
    // A warning leaves a whole image; a truncated file is an error all the same (PIL raises
    // for it too), other warnings (extraneous bytes) are accepted as PIL accepts them.
    if (tjGetErrorCode(handle) != TJERR_WARNING ||
        message.find("Premature end") != std::string::npos) {
      Corrupt(path, fmt::format("corrupt or truncated JPEG: {}", message));
    }
  }
  out.width = width;
  out.height = height;
  if (header.cmyk) {
    out.pixels.resize(pixels * 3);
    for (size_t i = 0; i < pixels; ++i) {
      const uint8_t* p = &cmyk_[i * 4];
      // Adobe files store CMYK inverted (PIL reads them as "CMYK;I").
      const int c = header.adobe ? 255 - p[0] : p[0];
      const int m = header.adobe ? 255 - p[1] : p[1];
      const int y = header.adobe ? 255 - p[2] : p[2];
      const int nk = header.adobe ? p[3] : 255 - p[3];
      out.pixels[i * 3] = CmykChannel(c, nk);
      out.pixels[i * 3 + 1] = CmykChannel(m, nk);
      out.pixels[i * 3 + 2] = CmykChannel(y, nk);
    }
  }
}

}  // namespace gpufeed
