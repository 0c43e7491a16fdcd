#include "sources/image_resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
// of a pass, taps outermost so the inner loop runs along contiguous bytes. Both passes use it
// (the horizontal one on a transposed copy). Built for AVX2 too (8 32-bit products at once),
// picked at load time where the CPU has it.
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

// out[x][y] = in[y][x] for 3-byte pixels; in has `width` pixels per row and `height` rows.
void TransposeRgb(const uint8_t* in, size_t in_stride, int width, int height, uint8_t* out) {
  const size_t out_stride = static_cast<size_t>(height) * 3;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * in_stride;
    uint8_t* column = out + static_cast<size_t>(y) * 3;
    for (int x = 0; x < width; ++x) {
      uint8_t* o = column + static_cast<size_t>(x) * out_stride;
      o[0] = row[x * 3];
      o[1] = row[x * 3 + 1];
      o[2] = row[x * 3 + 2];
    }
  }
}

// Resamples into `out` (HWC, output window size); returns a pointer to it. PIL's order and
// rounding: the horizontal pass over the input rows the vertical pass needs, rounded to 8 bits,
// then the vertical pass.
const uint8_t* Resample(const RgbView& in, const ResampleRegion& region,
                        const ResampleOutput& output, ResampleScratch& scratch,
                        std::vector<uint8_t>& out) {
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
  const size_t column_bytes = static_cast<size_t>(rows) * 3;
  // Horizontal pass on the transposed window: each output column is a weighted sum of whole
  // input columns.
  scratch.transposed.resize(static_cast<size_t>(cols) * column_bytes);
  TransposeRgb(
      in.pixels + static_cast<size_t>(wy0 + row_first) * in_stride + static_cast<size_t>(wx0) * 3,
      in_stride, cols, rows, scratch.transposed.data());
  scratch.image.resize(static_cast<size_t>(ow) * column_bytes);
  scratch.sums.resize(std::max(column_bytes, static_cast<size_t>(ow) * 3));
  for (int x = 0; x < ow; ++x) {
    const int xmin = scratch.bounds[static_cast<size_t>(x) * 2];
    const int taps = scratch.bounds[static_cast<size_t>(x) * 2 + 1];
    CombineLines(scratch.transposed.data() + static_cast<size_t>(xmin) * column_bytes, column_bytes,
                 taps, &scratch.coefficients[static_cast<size_t>(x) * hk], column_bytes,
                 scratch.sums.data(), scratch.image.data() + static_cast<size_t>(x) * column_bytes);
  }
  scratch.rows.resize(static_cast<size_t>(rows) * ow * 3);
  TransposeRgb(scratch.image.data(), column_bytes, rows, ow, scratch.rows.data());

  out.resize(static_cast<size_t>(output.height) * ow * 3);
  const size_t row_bytes = static_cast<size_t>(ow) * 3;
  for (int y = 0; y < output.height; ++y) {
    const int ymin = vbounds[static_cast<size_t>(y) * 2] - row_first;
    const int taps = vbounds[static_cast<size_t>(y) * 2 + 1];
    CombineLines(scratch.rows.data() + static_cast<size_t>(ymin) * row_bytes, row_bytes, taps,
                 &scratch.vertical[static_cast<size_t>(y) * vk], row_bytes, scratch.sums.data(),
                 out.data() + static_cast<size_t>(y) * row_bytes);
  }
  return out.data();
}

}  // namespace

void ResampleToChw(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                   bool flip, uint8_t* chw, ResampleScratch& scratch) {
  const uint8_t* hwc = Resample(in, region, output, scratch, scratch.output);
  const int w = output.width;
  const size_t plane = static_cast<size_t>(w) * output.height;
  for (int y = 0; y < output.height; ++y) {
    const uint8_t* row = hwc + static_cast<size_t>(y) * w * 3;
    uint8_t* r = chw + static_cast<size_t>(y) * w;
    uint8_t* g = r + plane;
    uint8_t* b = g + plane;
    for (int x = 0; x < w; ++x) {
      const int sx = flip ? w - 1 - x : x;
      r[x] = row[sx * 3];
      g[x] = row[sx * 3 + 1];
      b[x] = row[sx * 3 + 2];
    }
  }
}

void ResampleToRgb(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                   RgbImage& out, ResampleScratch& scratch) {
  Resample(in, region, output, scratch, out.pixels);
  out.width = output.width;
  out.height = output.height;
}

}  // namespace gpufeed
