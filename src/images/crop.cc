#include "images/crop.h"

#include <algorithm>
#include <cmath>

namespace gpufeed {

double UniformDouble(Pcg32& rng, double lo, double hi) {
  const double unit = static_cast<double>(rng.Next64() >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * unit;
}

CropRect RandomResizedCropRect(int width, int height, const RandomCropParams& params, Pcg32& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_min = std::log(params.ratio_min);
  const double log_max = std::log(params.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * UniformDouble(rng, params.scale_min, params.scale_max);
    const double ratio = std::exp(UniformDouble(rng, log_min, log_max));
    // std::nearbyint rounds half to even under the default rounding mode, as Python's round.
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * ratio)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropRect rect;
      rect.width = static_cast<int>(w);
      rect.height = static_cast<int>(h);
      rect.y = static_cast<int>(rng.Below(static_cast<uint64_t>(height - h + 1)));
      rect.x = static_cast<int>(rng.Below(static_cast<uint64_t>(width - w + 1)));
      return rect;
    }
  }
  CropRect rect;
  const double in_ratio = static_cast<double>(width) / height;
  const double ratio_low = std::min(params.ratio_min, params.ratio_max);
  const double ratio_high = std::max(params.ratio_min, params.ratio_max);
  if (in_ratio < ratio_low) {
    rect.width = width;
    rect.height = static_cast<int>(std::nearbyint(width / ratio_low));
  } else if (in_ratio > ratio_high) {
    rect.height = height;
    rect.width = static_cast<int>(std::nearbyint(height * ratio_high));
  } else {
    rect.width = width;
    rect.height = height;
  }
  rect.y = (height - rect.height) / 2;
  rect.x = (width - rect.width) / 2;
  return rect;
}

void ResizedSize(int width, int height, int resize, int& out_width, int& out_height) {
  if (width <= height) {
    out_width = resize;
    out_height = static_cast<int>(static_cast<int64_t>(resize) * height / width);
  } else {
    out_height = resize;
    out_width = static_cast<int>(static_cast<int64_t>(resize) * width / height);
  }
}

DctScale DctScaleFor(int width, int height, int need_width, int need_height) {
  // Only the scales libjpeg-turbo's SIMD IDCT covers: 3/8, 5/8, 3/4, 7/8 run in plain C
  // and measured slower here than the full-size decode they replace.
  for (const int denom : {8, 4, 2}) {
    // The scaled region is width / denom pixels (mapped, fractional): it must cover the need.
    if (static_cast<int64_t>(width) >= static_cast<int64_t>(need_width) * denom &&
        static_cast<int64_t>(height) >= static_cast<int64_t>(need_height) * denom) {
      return {1, denom};
    }
  }
  return {1, 1};
}

}  // namespace gpufeed
