// Resampling an RGB image region to an output size the way PIL's ImagingResample does for
// BILINEAR (a triangle filter whose support grows with the downscale factor, so downscaling
// averages every input pixel; 22-bit fixed-point weights, a horizontal then a vertical pass,
// each rounded to 8 bits). On an integer region it gives PIL's pixels exactly.
// Thread-safety: pure functions; ResampleScratch is one thread's.
#pragma once

#include <cstdint>
#include <vector>

#include "images/decode.h"

namespace gpufeed {

// The input region to resample, in input pixel coordinates: [x0, x1) x [y0, y1) (fractional
// where it was mapped from another scale). Filter taps stay inside the integer region
// [floor(x0), ceil(x1)) x [floor(y0), ceil(y1)), as they stay inside a cropped image.
struct ResampleRegion {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Which part of the resized image to produce: the region is resized to full_width x
// full_height and the window [left, left + width) x [top, top + height) of that is written
// (a centre crop after a resize; the whole of it for a resized crop).
struct ResampleOutput {
  int full_width = 0;
  int full_height = 0;
  int left = 0;
  int top = 0;
  int width = 0;
  int height = 0;
};

struct ResampleScratch {
  std::vector<int32_t> coefficients;  // horizontal
  std::vector<int> bounds;
  std::vector<int32_t> vertical;
  std::vector<int> vertical_bounds;
  std::vector<uint8_t> image;  // the input's last row with a byte to spare
  std::vector<uint8_t> rows;
  std::vector<uint8_t> output;
  std::vector<int32_t> sums;
};

// Resamples `region` of `in` and writes the output window channels first ([3, height, width],
// uint8) to `chw`, mirrored left-right when `flip`. REQUIRES: the region lies inside `in`
// and is not empty; the window lies inside the full output size.
void ResampleToChw(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                   bool flip, uint8_t* chw, ResampleScratch& scratch);

// The same into an RGB image (rows of width * 3 bytes) of the output window's size.
void ResampleToRgb(const RgbView& in, const ResampleRegion& region, const ResampleOutput& output,
                   RgbImage& out, ResampleScratch& scratch);

}  // namespace gpufeed
