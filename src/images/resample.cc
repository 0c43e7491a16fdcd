#include "images/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// PIL: PRECISION_BITS = 32 - 8 - 2 for 8-bit images.
constexpr int kPrecisionBits = 22;

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs for outputs [first, first + count) of resizing [in0, in1) (relative
// to the tap window [0, in_size)) to out_size pixels, and normalize_coeffs_8bpc. Returns the
// kernel size; bounds holds (xmin, taps) per output.
int AxisCoefficients(double in0, double in1, int in_size, int out_size, int first, int count,
                     std::vector<int32_t>& coefficients, std::vector<int>& bounds) {
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filter_scale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  coefficients.assign(static_cast<size_t>(ksize) * count, 0);
  bounds.assign(static_cast<size_t>(count) * 2, 0);
  std::vector<double> weights(static_cast<size_t>(ksize));
  for (int i = 0; i < count; ++i) {
    const int xx = first + i;
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    xmax = std::min(xmax, ksize);
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = Triangle((x + xmin - center + 0.5) * ss);
      weights[static_cast<size_t>(x)] = w;
      total += w;
    }
    int32_t* k = &coefficients[static_cast<size_t>(i) * ksize];
    for (int x = 0; x < std::max(xmax, 0); ++x) {
      const double w = total != 0.0 ? weights[static_cast<size_t>(x)] / total : 0.0;
      const double fixed = w * (1 << kPrecisionBits);
      k[x] = static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    bounds[static_cast<size_t>(i) * 2] = xmin;
    bounds[static_cast<size_t>(i) * 2 + 1] = std::max(xmax, 0);
  }
  return ksize;
}

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// The AVX2 clone is picked by an ifunc resolver, which runs while the program is relocated:
// before ThreadSanitizer's runtime is up, so TSan builds (which instrument the resolver and
// crash there) keep the one portable version.
#if defined(__SANITIZE_THREAD__)
#define GPUFEED_AVX2_CLONES
#else
#define GPUFEED_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#endif

// dst[c] = Clip8(sum over t of rows[t * stride + c] * k[t]) for c in [0, len): one output line
// of the vertical pass, taps outermost so the inner loop runs along contiguous bytes. Built for
// AVX2 too (8 32-bit products at once), picked at load time where the CPU has it.
GPUFEED_AVX2_CLONES void CombineLines(const uint8_t* rows, size_t stride, int taps,
                                      const int32_t* k, size_t len, int32_t* sums, uint8_t* dst) {
  for (size_t c = 0; c < len; ++c) sums[c] = 1 << (kPrecisionBits - 1);
  for (int t = 0; t < taps; ++t) {
    const uint8_t* p = rows + static_cast<size_t>(t) * stride;
    const int32_t weight = k[t];
    for (size_t c = 0; c < len; ++c) sums[c] += p[c] * weight;
  }
  for (size_t c = 0; c < len; ++c) dst[c] = Clip8(sums[c]);
}

// One row of the horizontal pass: for the `width` outputs x, channel c of
// Clip8(sum over taps t of row[(xmin + t) * 3 + c] * k[x * ksize + t]), (xmin, taps) in
// `bounds`, goes to planes[c][flip ? width - 1 - x : x] (channels first, mirrored when
// `flip`: the vertical pass then works on each plane and writes the output as it is).
// Reads the byte after each tap's pixel (a 4-byte load): `row` must have one byte to spare
// after its last pixel.
void HorizontalRowPortable(const uint8_t* row, int width, const int* bounds, const int32_t* k,
                           int ksize, bool flip, uint8_t* const planes[3]) {
  for (int x = 0; x < width; ++x) {
    const uint8_t* p = row + static_cast<size_t>(bounds[x * 2]) * 3;
    const int taps = bounds[x * 2 + 1];
    const int32_t* w = k + static_cast<size_t>(x) * ksize;
    int32_t r = 1 << (kPrecisionBits - 1);
    int32_t g = r;
    int32_t b = r;
    for (int t = 0; t < taps; ++t) {
      r += p[t * 3] * w[t];
      g += p[t * 3 + 1] * w[t];
      b += p[t * 3 + 2] * w[t];
    }
    const int at = flip ? width - 1 - x : x;
    planes[0][at] = Clip8(r);
    planes[1][at] = Clip8(g);
    planes[2][at] = Clip8(b);
  }
}

#if defined(__x86_64__)
// The same with the three channels of a pixel in one SSE4.1 vector (the fourth lane, the next
// pixel's first byte, is computed and dropped): no transposition of the image is needed.
__attribute__((target("sse4.1"))) void HorizontalRowSse41(const uint8_t* row, int width,
                                                          const int* bounds, const int32_t* k,
                                                          int ksize, bool flip,
                                                          uint8_t* const planes[3]) {
  const __m128i half = _mm_set1_epi32(1 << (kPrecisionBits - 1));
  for (int x = 0; x < width; ++x) {
    const uint8_t* p = row + static_cast<size_t>(bounds[x * 2]) * 3;
    const int taps = bounds[x * 2 + 1];
    const int32_t* w = k + static_cast<size_t>(x) * ksize;
    __m128i sum = half;
    for (int t = 0; t < taps; ++t) {
      int32_t pixel;
      std::memcpy(&pixel, p + t * 3, 4);
      sum = _mm_add_epi32(
          sum, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(pixel)), _mm_set1_epi32(w[t])));
    }
    // Clip8: the arithmetic shift, then saturation to int16 and to uint8 clamps to [0, 255].
    sum = _mm_srai_epi32(sum, kPrecisionBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
    const uint32_t out = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
    const int at = flip ? width - 1 - x : x;
    planes[0][at] = static_cast<uint8_t>(out);
    planes[1][at] = static_cast<uint8_t>(out >> 8);
    planes[2][at] = static_cast<uint8_t>(out >> 16);
  }
}
#endif

using HorizontalRowFn = void (*)(const uint8_t*, int, const int*, const int32_t*, int, bool,
                                 uint8_t* const[3]);

HorizontalRowFn PickHorizontalRow() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // this runs as a static initializer, maybe before the runtime's own
  if (__builtin_cpu_supports("sse4.1")) return HorizontalRowSse41;
#endif
  return HorizontalRowPortable;
}

const HorizontalRowFn kHorizontalRow = PickHorizontalRow();

// An integer region as large as the full output on both axes: PIL's resize at the same size
// is a copy (and the filter's one tap of weight 1 gives the same bytes), so the window is
// copied out channels first. Images stored at the size a center crop resizes to (data sets
// pre-resized to 256) take this path on every read.
bool IsSameSize(const ResampleRegion& region, const ResampleOutput& output) {
  return region.x0 == std::floor(region.x0) && region.y0 == std::floor(region.y0) &&
         region.x1 - region.x0 == output.full_width && region.y1 - region.y0 == output.full_height;
}

void CopyWindow(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                bool flip, uint8_t* chw) {
  const int w = output.width;
  const size_t plane = static_cast<size_t>(w) * output.height;
  const auto x0 = static_cast<size_t>(region.x0) + static_cast<size_t>(output.left);
  const auto y0 = static_cast<size_t>(region.y0) + static_cast<size_t>(output.top);
  const size_t stride = static_cast<size_t>(in.width) * 3;
  for (int y = 0; y < output.height; ++y) {
    const uint8_t* src = in.pixels + (y0 + static_cast<size_t>(y)) * stride + x0 * 3;
    uint8_t* r = chw + static_cast<size_t>(y) * w;
    uint8_t* g = r + plane;
    uint8_t* b = g + plane;
    for (int x = 0; x < w; ++x) {
      const int at = flip ? w - 1 - x : x;
      r[at] = src[x * 3];
      g[at] = src[x * 3 + 1];
      b[at] = src[x * 3 + 2];
    }
  }
}

// Resamples into `chw` (channels first, the output window's size, mirrored when `flip`). PIL's
// order and rounding: the horizontal pass over the input rows the vertical pass needs,
// rounded to 8 bits, then the vertical pass.
void Resample(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
              bool flip, ResampleScratch& scratch, uint8_t* chw) {
  GPUFEED_ASSERT(region.x1 > region.x0 && region.y1 > region.y0, "empty resample region");
  GPUFEED_ASSERT(output.left >= 0 && output.top >= 0 &&
                     output.left + output.width <= output.full_width &&
                     output.top + output.height <= output.full_height,
                 "resample window outside the output");
  // The tap window: the integer region, as a crop would cut it.
  const int wx0 = std::max(0, static_cast<int>(std::floor(region.x0)));
  const int wy0 = std::max(0, static_cast<int>(std::floor(region.y0)));
  const int wx1 = std::min(in.width, static_cast<int>(std::ceil(region.x1)));
  const int wy1 = std::min(in.height, static_cast<int>(std::ceil(region.y1)));
  GPUFEED_ASSERT(wx1 > wx0 && wy1 > wy0, "resample region outside the image");
  if (IsSameSize(region, output)) {
    GPUFEED_ASSERT(region.x1 <= in.width && region.y1 <= in.height,
                   "resample region outside the image");
    CopyWindow(in, region, output, flip, chw);
    return;
  }

  // Vertical coefficients first: they say which input rows the horizontal pass needs.
  const int vk =
      AxisCoefficients(region.y0 - wy0, region.y1 - wy0, wy1 - wy0, output.full_height, output.top,
                       output.height, scratch.vertical, scratch.vertical_bounds);
  const auto& vbounds = scratch.vertical_bounds;
  int row_first = wy1 - wy0;
  int row_last = 0;
  for (int i = 0; i < output.height; ++i) {
    row_first = std::min(row_first, vbounds[static_cast<size_t>(i) * 2]);
    row_last = std::max(
        row_last, vbounds[static_cast<size_t>(i) * 2] + vbounds[static_cast<size_t>(i) * 2 + 1]);
  }
  const int rows = std::max(row_last - row_first, 0);
  const int cols = wx1 - wx0;

  const int hk = AxisCoefficients(region.x0 - wx0, region.x1 - wx0, cols, output.full_width,
                                  output.left, output.width, scratch.coefficients, scratch.bounds);
  const int ow = output.width;
  const size_t in_stride = static_cast<size_t>(in.width) * 3;
  // Horizontal pass, row by row, over the input rows the vertical pass needs, into three
  // planes of `rows` x `ow`. A row's last pixel is read with one byte to spare: the image's
  // last row is copied out first.
  const size_t plane_rows = static_cast<size_t>(rows) * ow;
  scratch.rows.resize(plane_rows * 3);
  const size_t window_bytes = static_cast<size_t>(cols) * 3;
  for (int r = 0; r < rows; ++r) {
    const int y = wy0 + row_first + r;
    const uint8_t* row =
        in.pixels + static_cast<size_t>(y) * in_stride + static_cast<size_t>(wx0) * 3;
    if (y == in.height - 1 && wx1 == in.width) {
      scratch.image.resize(window_bytes + 1);
      std::memcpy(scratch.image.data(), row, window_bytes);
      scratch.image[window_bytes] = 0;
      row = scratch.image.data();
    }
    uint8_t* line = scratch.rows.data() + static_cast<size_t>(r) * ow;
    uint8_t* const planes[3] = {line, line + plane_rows, line + 2 * plane_rows};
    kHorizontalRow(row, ow, scratch.bounds.data(), scratch.coefficients.data(), hk, flip, planes);
  }
  scratch.sums.resize(static_cast<size_t>(ow));

  // Vertical pass, plane by plane, straight into the output planes.
  const size_t out_plane = static_cast<size_t>(output.height) * ow;
  for (int c = 0; c < 3; ++c) {
    const uint8_t* plane = scratch.rows.data() + c * plane_rows;
    for (int y = 0; y < output.height; ++y) {
      const int ymin = vbounds[static_cast<size_t>(y) * 2] - row_first;
      const int taps = vbounds[static_cast<size_t>(y) * 2 + 1];
      CombineLines(plane + static_cast<size_t>(ymin) * ow, static_cast<size_t>(ow), taps,
                   &scratch.vertical[static_cast<size_t>(y) * vk], static_cast<size_t>(ow),
                   scratch.sums.data(), chw + c * out_plane + static_cast<size_t>(y) * ow);
    }
  }
}

}  // namespace

void ResampleToChw(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                   bool flip, uint8_t* chw, ResampleScratch& scratch) {
  Resample(in, region, output, flip, scratch, chw);
}

void ResampleToRgb(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                   RgbImage& out, ResampleScratch& scratch) {
  const size_t plane = static_cast<size_t>(output.width) * output.height;
  scratch.output.resize(plane * 3);
  Resample(in, region, output, false, scratch, scratch.output.data());
  out.width = output.width;
  out.height = output.height;
  out.pixels.resize(plane * 3);
  for (size_t i = 0; i < plane; ++i) {
    out.pixels[i * 3] = scratch.output[i];
    out.pixels[i * 3 + 1] = scratch.output[plane + i];
    out.pixels[i * 3 + 2] = scratch.output[2 * plane + i];
  }
}

}  // namespace gpufeed
