#include "gpufeed/transforms.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <string_view>

#include "core/text.h"
#include "gpufeed/error.h"
#include "pipeline/random.h"

namespace gpufeed {
namespace {

float Load(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return BFloat16ToFloat(v);
    }
    default:
      GPUFEED_ASSERT(false, "Load on a non-floating dtype");
  }
}

void Store(std::byte* p, DType dtype, float value) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(p, &value, 4);
      return;
    case DType::kFloat64: {
      const double v = value;
      std::memcpy(p, &v, 8);
      return;
    }
    case DType::kFloat16: {
      const uint16_t v = FloatToHalf(value);
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t v = FloatToBFloat16(value);
      std::memcpy(p, &v, 2);
      return;
    }
    default:
      GPUFEED_ASSERT(false, "Store on a non-floating dtype");
  }
}

const FieldSpec& FloatingField(const Schema& schema, const std::string& field,
                               std::string_view transform) {
  const FieldSpec& spec = schema.Field(field);
  if (!IsFloating(spec.dtype)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} needs a floating field, but '{}' is {}", transform, field,
                            DTypeName(spec.dtype)));
  }
  return spec;
}

// `input` with field `field` of dtype `to`.
Schema WithDType(const Schema& input, const std::string& field, DType to) {
  Schema out = input;
  out.fields[static_cast<size_t>(out.IndexOf(field))].dtype = to;
  return out;
}

class CastTransform : public Transform {
 public:
  CastTransform(std::string field, DType to) : field_(std::move(field)), to_(to) {
    if (!IsFloating(to)) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cast of '{}' to {}: only float16, bfloat16, float32 and float64 "
                              "are supported targets",
                              field_, DTypeName(to)));
    }
  }
  std::string name() const override { return fmt::format("cast({}->{})", field_, DTypeName(to_)); }
  bool deterministic() const override { return true; }
  Schema OutputSchema(const Schema& input) const override {
    FloatingField(input, field_, "cast");
    return WithDType(input, field_, to_);
  }
  void Apply(const Schema& input, const BatchView& batch, uint64_t) const override {
    const int index = input.IndexOf(field_);
    const FieldSpec& spec = input.fields[static_cast<size_t>(index)];
    if (spec.dtype == to_) return;
    std::byte* data = batch.fields[static_cast<size_t>(index)];
    const int64_t n = batch.rows * spec.ElementsPerSample();
    const size_t in_size = DTypeSize(spec.dtype);
    const size_t out_size = DTypeSize(to_);
    // In place: a narrowing cast walks forward (each write lands at or before its read),
    // a widening one walks backward.
    if (out_size <= in_size) {
      if (spec.dtype == DType::kFloat32 && to_ == DType::kFloat16) {
        const auto* in = reinterpret_cast<const std::byte*>(data);
        for (int64_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, in + i * 4, 4);
          const uint16_t h = FloatToHalf(v);
          std::memcpy(data + i * 2, &h, 2);
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        Store(data + static_cast<size_t>(i) * out_size, to_,
              Load(data + static_cast<size_t>(i) * in_size, spec.dtype));
      }
    } else {
      for (int64_t i = n - 1; i >= 0; --i) {
        Store(data + static_cast<size_t>(i) * out_size, to_,
              Load(data + static_cast<size_t>(i) * in_size, spec.dtype));
      }
    }
  }

 private:
  std::string field_;
  DType to_;
};

// An integer field widened to a signed type that holds every value of it exactly (token ids
// stored as uint16 to int32, which torch reads): uint8, int8, uint16, int16 to int32 or
// int64; uint32 and int32 to int64.
bool Widens(DType from, DType to) {
  const bool from_int = !IsFloating(from) && from != DType::kBool && from != DType::kUInt64 &&
                        from != DType::kInt64;
  if (!from_int || (to != DType::kInt32 && to != DType::kInt64)) return false;
  return DTypeSize(to) > DTypeSize(from) || (from == DType::kInt32 && to == DType::kInt32);
}

template <typename From, typename To>
void WidenBackward(std::byte* data, int64_t n) {
  for (int64_t i = n - 1; i >= 0; --i) {
    From v;
    std::memcpy(&v, data + static_cast<size_t>(i) * sizeof(From), sizeof(From));
    const To w = static_cast<To>(v);
    std::memcpy(data + static_cast<size_t>(i) * sizeof(To), &w, sizeof(To));
  }
}

template <typename To>
void WidenTo(DType from, std::byte* data, int64_t n) {
  switch (from) {
    case DType::kUInt8: return WidenBackward<uint8_t, To>(data, n);
    case DType::kInt8: return WidenBackward<int8_t, To>(data, n);
    case DType::kUInt16: return WidenBackward<uint16_t, To>(data, n);
    case DType::kInt16: return WidenBackward<int16_t, To>(data, n);
    case DType::kUInt32: return WidenBackward<uint32_t, To>(data, n);
    case DType::kInt32: return WidenBackward<int32_t, To>(data, n);
    default: GPUFEED_ASSERT(false, "WidenTo from a dtype it does not widen");
  }
}

class WidenTransform : public Transform {
 public:
  WidenTransform(std::string field, DType to) : field_(std::move(field)), to_(to) {}
  std::string name() const override { return fmt::format("cast({}->{})", field_, DTypeName(to_)); }
  bool deterministic() const override { return true; }
  Schema OutputSchema(const Schema& input) const override {
    const FieldSpec& spec = input.Field(field_);
    if (!Widens(spec.dtype, to_)) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cast of '{}' ({}) to {}: an integer field widens to a signed "
                              "type that holds all its values (uint8..int16 to int32 or int64, "
                              "uint32 or int32 to int64); floating fields cast to float16, "
                              "bfloat16, float32 or float64",
                              field_, DTypeName(spec.dtype), DTypeName(to_)));
    }
    return WithDType(input, field_, to_);
  }
  void Apply(const Schema& input, const BatchView& batch, uint64_t) const override {
    const int index = input.IndexOf(field_);
    const FieldSpec& spec = input.fields[static_cast<size_t>(index)];
    if (spec.dtype == to_) return;
    std::byte* data = batch.fields[static_cast<size_t>(index)];
    const int64_t n = batch.rows * spec.ElementsPerSample();
    // In place, walking backward: each wider write lands at or after its read.
    if (to_ == DType::kInt32) {
      WidenTo<int32_t>(spec.dtype, data, n);
    } else {
      WidenTo<int64_t>(spec.dtype, data, n);
    }
  }

 private:
  std::string field_;
  DType to_;
};

class NormalizeTransform : public Transform {
 public:
  NormalizeTransform(std::string field, float mean, float std)
      : field_(std::move(field)), mean_(mean), inv_std_(1.0f / std) {
    if (!(std > 0.0f)) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("normalize of '{}': std must be positive, got {}", field_, std));
    }
  }
  bool deterministic() const override { return true; }
  std::string name() const override {
    return fmt::format("normalize({}, mean={}, std={})", field_, mean_, 1.0f / inv_std_);
  }
  Schema OutputSchema(const Schema& input) const override {
    FloatingField(input, field_, "normalize");
    return input;
  }
  void Apply(const Schema& input, const BatchView& batch, uint64_t) const override {
    const int index = input.IndexOf(field_);
    const FieldSpec& spec = input.fields[static_cast<size_t>(index)];
    std::byte* data = batch.fields[static_cast<size_t>(index)];
    const int64_t n = batch.rows * spec.ElementsPerSample();
    if (spec.dtype == DType::kFloat32) {
      auto* f = reinterpret_cast<float*>(data);  // batch fields are 64-byte aligned
      for (int64_t i = 0; i < n; ++i) f[i] = (f[i] - mean_) * inv_std_;
      return;
    }
    const size_t size = DTypeSize(spec.dtype);
    for (int64_t i = 0; i < n; ++i) {
      std::byte* p = data + static_cast<size_t>(i) * size;
      Store(p, spec.dtype, (Load(p, spec.dtype) - mean_) * inv_std_);
    }
  }

 private:
  std::string field_;
  float mean_;
  float inv_std_;
};

class SpecAugmentTransform : public Transform {
 public:
  SpecAugmentTransform(std::string field, SpecAugmentOptions options)
      : field_(std::move(field)), options_(options) {
    if (options_.freq_masks < 0 || options_.time_masks < 0 || options_.max_freq < 0 ||
        options_.max_time < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("specaugment of '{}': mask counts and widths must be >= 0", field_));
    }
  }
  std::string name() const override {
    return fmt::format("specaugment({}, freq {}x{}, time {}x{})", field_, options_.freq_masks,
                       options_.max_freq, options_.time_masks, options_.max_time);
  }
  Schema OutputSchema(const Schema& input) const override {
    const FieldSpec& spec = FloatingField(input, field_, "specaugment");
    if (spec.shape.size() < 2) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("specaugment needs a field shaped [..., frequency, time], but '{}' "
                              "has shape {}",
                              field_, spec.ToString()));
    }
    return input;
  }
  void Apply(const Schema& input, const BatchView& batch, uint64_t seed) const override {
    const int index = input.IndexOf(field_);
    const FieldSpec& spec = input.fields[static_cast<size_t>(index)];
    const int64_t freq = spec.shape[spec.shape.size() - 2];
    const int64_t time = spec.shape.back();
    const int64_t planes = spec.ElementsPerSample() / (freq * time);
    const size_t size = DTypeSize(spec.dtype);
    std::byte* data = batch.fields[static_cast<size_t>(index)];
    for (int64_t row = 0; row < batch.rows; ++row) {
      Pcg32 rng(MixSeed(seed, static_cast<uint64_t>(row)));
      std::byte* sample = data + static_cast<size_t>(row) * spec.SampleBytes();
      auto mask = [&](int64_t f0, int64_t f1, int64_t t0, int64_t t1) {
        for (int64_t p = 0; p < planes; ++p) {
          for (int64_t f = f0; f < f1; ++f) {
            for (int64_t t = t0; t < t1; ++t) {
              Store(sample + static_cast<size_t>((p * freq + f) * time + t) * size, spec.dtype,
                    options_.value);
            }
          }
        }
      };
      for (int m = 0; m < options_.freq_masks; ++m) {
        const auto width = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(
            std::min<int64_t>(options_.max_freq, freq) + 1)));
        const auto start = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(freq - width + 1)));
        mask(start, start + width, 0, time);
      }
      for (int m = 0; m < options_.time_masks; ++m) {
        const auto width = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(
            std::min<int64_t>(options_.max_time, time) + 1)));
        const auto start = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(time - width + 1)));
        mask(0, freq, start, start + width);
      }
    }
  }

 private:
  std::string field_;
  SpecAugmentOptions options_;
};

template <typename T>
T Number(std::string_view spec, std::string_view text) {
  const std::optional<T> value = ParseNumber<T>(text);
  if (!value) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("transform '{}': '{}' is not a number", spec, text));
  }
  return *value;
}

}  // namespace

std::shared_ptr<Transform> Cast(std::string field, DType to) {
  if (to == DType::kInt32 || to == DType::kInt64) {
    return std::make_shared<WidenTransform>(std::move(field), to);
  }
  return std::make_shared<CastTransform>(std::move(field), to);
}

std::shared_ptr<Transform> Normalize(std::string field, float mean, float std) {
  return std::make_shared<NormalizeTransform>(std::move(field), mean, std);
}

std::shared_ptr<Transform> SpecAugment(std::string field, SpecAugmentOptions options) {
  return std::make_shared<SpecAugmentTransform>(std::move(field), options);
}

std::shared_ptr<Transform> ParseTransform(const std::string& spec) {
  const auto parts = Split(spec, ':');
  const auto bad = [&](std::string_view why) {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("bad transform '{}': {} (expected cast:FIELD:float16|bfloat16|int32|int64, "
                             "normalize:FIELD:MEAN:STD or specaugment:FIELD[:FM:F:TM:T])",
                             spec, why));
  };
  if (parts.size() < 2 || parts[1].empty()) throw bad("no field");
  const std::string field(parts[1]);
  if (parts[0] == "cast") {
    if (parts.size() != 3) throw bad("cast takes a field and a dtype");
    const auto dtype = ParseDType(parts[2]);
    if (!dtype) throw bad(fmt::format("unknown dtype '{}'", parts[2]));
    return Cast(field, *dtype);
  }
  if (parts[0] == "normalize") {
    if (parts.size() != 4) throw bad("normalize takes a field, a mean and a std");
    return Normalize(field, Number<float>(spec, parts[2]), Number<float>(spec, parts[3]));
  }
  if (parts[0] == "specaugment") {
    SpecAugmentOptions options;
    if (parts.size() == 6) {
      options.freq_masks = Number<int>(spec, parts[2]);
      options.max_freq = Number<int>(spec, parts[3]);
      options.time_masks = Number<int>(spec, parts[4]);
      options.max_time = Number<int>(spec, parts[5]);
    } else if (parts.size() != 2) {
      throw bad("specaugment takes a field and optionally four numbers");
    }
    return SpecAugment(field, options);
  }
  throw bad(fmt::format("unknown transform '{}'", parts[0]));
}

}  // namespace gpufeed
