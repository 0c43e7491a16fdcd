// JPEG: headers and windows through libjpeg's API, whole images through TurboJPEG's (its
// DCT scaling and CMYK output). Both share one libjpeg-turbo build; every call that fails
// leaves the decoder to be reset by its caller (ImageDecoder), never half-used.
#include <fmt/format.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// After <cstdio>: jpeglib.h uses FILE and size_t without including their headers.
#include <jerror.h>
#include <jpeglib.h>

#include "gpufeed/error.h"
#include "images/decode.h"

namespace gpufeed {
namespace {

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
  char warning[JMSG_LENGTH_MAX];  // the first warning since the last Clear
  bool premature_end;             // a "Premature end of JPEG file" warning: the data ran out
  void Clear() {
    message[0] = '\0';
    warning[0] = '\0';
    premature_end = false;
  }
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
  if (errors->warning[0] == '\0') (*cinfo->err->format_message)(cinfo, errors->warning);
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

// A progressive file may hold any number of scans (libjpeg only warns about a scan that adds
// nothing): each one is a pass over the whole image, so a small file could take minutes.
// TurboJPEG's TJFLAG_LIMITSCANS stops at 500; the libjpeg calls stop there too.
constexpr int kMaxScans = 500;

void LimitScans(j_common_ptr common) {
  auto* cinfo = reinterpret_cast<j_decompress_ptr>(common);
  if (cinfo->is_decompressor && cinfo->progressive_mode && cinfo->input_scan_number > kMaxScans) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(errors->message, sizeof(errors->message),
                  "Progressive JPEG image has more than %d scans", kMaxScans);
    std::longjmp(errors->jump, 1);
  }
}

// What jpeg_read_header says about a file's frame.
struct JpegFrame {
  const uint8_t* data;
  unsigned long size;  // NOLINT(runtime/int): libjpeg's type
  int width;
  int height;
  bool cmyk;
};

// Reads the header with libjpeg (not TurboJPEG, whose header call leaves its decompressor
// mid-header after an error and fails every later file). Returns false with the message in
// `errors` on a libjpeg error. Plain data only in this frame: longjmp lands here.
bool ReadJpegFrame(jpeg_decompress_struct* cinfo, JpegErrors* errors, JpegFrame* frame) {
  if (setjmp(errors->jump) != 0) return false;
  jpeg_mem_src(cinfo, frame->data, frame->size);
  jpeg_read_header(cinfo, TRUE);
  frame->width = static_cast<int>(cinfo->image_width);
  frame->height = static_cast<int>(cinfo->image_height);
  frame->cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  jpeg_abort_decompress(cinfo);
  return true;
}

// Refuses, before libjpeg sees them, the well-formed JPEGs libjpeg-turbo cannot decode.
void CheckJpegProcess(const JpegMarkers& markers, const std::string& path) {
  const int m = markers.frame_marker;
  const char* process = nullptr;
  if (m == 0xC3 || m == 0xC7 || m == 0xCB || m == 0xCF) {
    process = "lossless";
  } else if (m == 0xC5 || m == 0xC6 || m == 0xCD || m == 0xCE) {
    process = "hierarchical";
  }
  if (process != nullptr) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: {} JPEG (frame marker 0x{:02x}), which gpufeed does not decode "
                            "(it decodes 8-bit baseline, extended, progressive and "
                            "arithmetic-coded JPEGs)",
                            path, process, m));
  }
  if (m != 0 && markers.precision != 8) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: {}-bit JPEG (sample precision {}), which gpufeed does not "
                            "decode (it decodes 8-bit JPEGs)",
                            path, markers.precision, markers.precision));
  }
}

}  // namespace

struct ImageDecoder::JpegState {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  jpeg_progress_mgr progress;
  JpegState() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    std::memset(&errors, 0, sizeof(errors));
    std::memset(&progress, 0, sizeof(progress));
    cinfo.err = jpeg_std_error(&errors.mgr);
    errors.mgr.error_exit = JpegErrorExit;
    errors.mgr.emit_message = JpegEmitMessage;
    jpeg_create_decompress(&cinfo);  // only an out-of-memory error could jump: none here
    progress.progress_monitor = LimitScans;
    cinfo.progress = &progress;
  }
  ~JpegState() { jpeg_destroy_decompress(&cinfo); }
  JpegState(const JpegState&) = delete;
  JpegState& operator=(const JpegState&) = delete;
};

ImageDecoder::ImageDecoder() = default;

ImageDecoder::~ImageDecoder() { Reset(); }

void ImageDecoder::Reset() {
  if (jpeg_ != nullptr) tjDestroy(static_cast<tjhandle>(jpeg_));
  jpeg_ = nullptr;
  state_.reset();
}

ImageDecoder::JpegState& ImageDecoder::Jpeg() {
  if (state_ == nullptr) state_ = std::make_unique<JpegState>();
  return *state_;
}

ImageHeader ImageDecoder::ReadJpegHeader(std::span<const uint8_t> bytes, const std::string& path,
                                         uint64_t max_pixels) {
  const JpegMarkers markers = ReadJpegMarkers(bytes);
  CheckJpegProcess(markers, path);
  JpegErrors* errors = &Jpeg().errors;
  errors->Clear();
  JpegFrame frame{bytes.data(), static_cast<unsigned long>(bytes.size()),  // NOLINT
                  0, 0, false};
  if (!ReadJpegFrame(&Jpeg().cinfo, errors, &frame)) {
    CorruptImage(path, fmt::format("corrupt or truncated JPEG header: {}", errors->message));
  }
  if (frame.width <= 0 || frame.height <= 0) {
    CorruptImage(path, "corrupt or truncated JPEG header: no frame size before the data ends");
  }
  CheckImagePixels(path, "JPEG", static_cast<uint64_t>(frame.width),
                   static_cast<uint64_t>(frame.height), max_pixels);
  NoteWarning(errors->warning);
  ImageHeader header;
  header.format = ImageFormat::kJpeg;
  header.width = frame.width;
  header.height = frame.height;
  header.cmyk = frame.cmyk;
  header.orientation = markers.orientation;
  header.adobe = markers.adobe;
  return header;
}

void ImageDecoder::DecodeJpegWindow(std::span<const uint8_t> bytes, const ImageHeader& header,
                                    DctScale scale, int x0, int y0, int x1, int y1,
                                    const std::string& path, RgbImage& out, int& origin_x,
                                    int& origin_y) {
  jpeg_decompress_struct* cinfo = &Jpeg().cinfo;
  JpegErrors* errors = &Jpeg().errors;
  errors->Clear();
  JpegWindowJob job{};
  job.data = bytes.data();
  job.size = static_cast<unsigned long>(bytes.size());  // NOLINT(runtime/int)
  job.scale_denom = scale.denom;
  job.read_to_end = !EndsWithEoi(bytes);
  job.x0 = x0;
  job.y0 = y0;
  job.x1 = x1;
  job.y1 = y1;
  const auto fail = [&](const std::string& what) { CorruptImage(path, what); };
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
    CorruptImage(path, "corrupt or truncated JPEG: Premature end of JPEG file");
  }
  NoteWarning(errors->warning);
  origin_x = job.origin_x;
  origin_y = job.first_row;
}

void ImageDecoder::DecodeJpeg(std::span<const uint8_t> bytes, const ImageHeader& header,
                              DctScale scale, const std::string& path, RgbImage& out) {
  if (jpeg_ == nullptr) {
    jpeg_ = tjInitDecompress();
    if (jpeg_ == nullptr) {
      throw Error(ErrorCode::kIo, fmt::format("libjpeg-turbo: {}", tjGetErrorStr2(nullptr)));
    }
  }
  auto* handle = static_cast<tjhandle>(jpeg_);
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
                    TJFLAG_LIMITSCANS) != 0) {
    const std::string message = tjGetErrorStr2(handle);
    // Without TJFLAG_STOPONWARNING a warning leaves a whole image; a truncated file is an
    // error all the same (PIL raises for it too), other warnings (extraneous bytes) are
    // accepted as PIL accepts them, and noted.
    if (tjGetErrorCode(handle) != TJERR_WARNING ||
        message.find("Premature end") != std::string::npos) {
      CorruptImage(path, fmt::format("corrupt or truncated JPEG: {}", message));
    }
    NoteWarning(message);
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
