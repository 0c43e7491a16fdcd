// Where an image's output comes from: torchvision's RandomResizedCrop parameters drawn from a
// seeded generator, the Resize + CenterCrop window for evaluation, and the DCT scale a JPEG
// can be decoded at without losing resolution the output needs.
// Thread-safety: pure functions; a Pcg32 is one thread's.
#pragma once

#include <cstdint>

#include "images/decode.h"
#include "pipeline/random.h"

namespace gpufeed {

struct CropRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

struct RandomCropParams {
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
};

// A double uniform in [lo, hi) from 53 random bits.
double UniformDouble(Pcg32& rng, double lo, double hi);

// torchvision 0.14's RandomResizedCrop.get_params on a width x height image: ten tries of an
// area share in [scale_min, scale_max] and a log-uniform aspect ratio, sides rounded half to
// even as Python's round(); a try that fits picks its corner uniformly; else the centre crop
// clamped to the ratio range.
CropRect RandomResizedCropRect(int width, int height, const RandomCropParams& params, Pcg32& rng);

// torchvision's Resize(shorter side = `resize`) output size: the shorter side becomes
// `resize`, the longer int(resize * long / short).
void ResizedSize(int width, int height, int resize, int& out_width, int& out_height);

// The smallest of 1/8, 1/4, 1/2 (else 1/1) at which a `width` x `height` region of the full
// image is still at least `need_width` x `need_height` pixels: the scaled IDCT does less
// work, and the resize after it still only reduces.
DctScale DctScaleFor(int width, int height, int need_width, int need_height);

}  // namespace gpufeed
