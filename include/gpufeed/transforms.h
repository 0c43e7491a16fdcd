// Host transforms, applied in place to a batch after it is read and before it is copied to
// the device: casts to float16 / bfloat16, per-field normalization, SpecAugment-style masks.
// Randomized transforms draw from a seed derived from (loader seed, epoch, batch), so a
// seed gives the same batches whichever worker builds them.
// Thread-safety: a Transform is immutable after construction; Apply is called from many
// worker threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/schema.h"
#include "gpufeed/source.h"

namespace gpufeed {

class Transform {
 public:
  virtual ~Transform() = default;
  // "cast(mel->float16)"
  virtual std::string name() const = 0;
  // The schema after this transform, given the one before. Throws Error(kInvalidArgument)
  // for a missing field or a dtype the transform cannot take.
  virtual Schema OutputSchema(const Schema& input) const = 0;
  // Transforms `batch` (laid out by `input`) in place; afterwards it is laid out by
  // OutputSchema(input). A field's buffer holds max(input, output) bytes per row.
  virtual void Apply(const Schema& input, const BatchView& batch, uint64_t seed) const = 0;
  // True when Apply ignores `seed` (a sample's output depends only on the sample): then it
  // may run once, before caching (the device tier does). Default: false, so a transform
  // that does not say is treated as random.
  virtual bool deterministic() const { return false; }
};

// Casts a floating field to float16 or bfloat16 (or float32), rounding to nearest even; or
// widens an integer field to int32 or int64 where every value fits (uint16 token ids to int32,
// which torch reads; uint32 to int64).
std::shared_ptr<Transform> Cast(std::string field, DType to);

// (x - mean) / std on a floating field, in its own dtype. REQUIRES: std > 0.
std::shared_ptr<Transform> Normalize(std::string field, float mean, float std);

// SpecAugment-style masking on a field whose last two axes are [frequency, time]: each of
// `freq_masks` masks zeroes (sets to `value`) up to `max_freq` consecutive frequency rows,
// each of `time_masks` masks up to `max_time` consecutive frames, chosen per sample.
struct SpecAugmentOptions {
  int freq_masks = 2;  // Default: 2
  int max_freq = 8;    // Default: 8 bins
  int time_masks = 2;  // Default: 2
  int max_time = 4;    // Default: 4 frames
  float value = 0.0f;  // Default: 0
};
std::shared_ptr<Transform> SpecAugment(std::string field, SpecAugmentOptions options = {});

// Parses a CLI/Python transform spec: "cast:mel:float16", "normalize:mel:0.5:0.25",
// "specaugment:mel" or "specaugment:mel:2:8:2:4". Throws Error(kInvalidArgument).
std::shared_ptr<Transform> ParseTransform(const std::string& spec);

}  // namespace gpufeed
