#include "gpufeed/transforms.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

struct Batch {
  Schema schema;
  std::vector<std::vector<std::byte>> storage;
  BatchView view;
  Batch(Schema s, int64_t rows) : schema(std::move(s)) {
    view.rows = rows;
    for (const auto& f : schema.fields) {
      // Room for the widest dtype a transform may produce (8 bytes per element).
      storage.emplace_back(static_cast<size_t>(rows * f.ElementsPerSample() * 8));
      view.fields.push_back(storage.back().data());
    }
  }
  float* f32(int field) {
    return reinterpret_cast<float*>(view.fields[static_cast<size_t>(field)]);
  }
};

TEST(Transforms, CastToFloat16AndBFloat16InPlace) {
  for (DType to : {DType::kFloat16, DType::kBFloat16}) {
    Batch b(ParseSchema("x:float32[3]"), 2);
    const float values[6] = {1.0f, -2.0f, 0.5f, 3.0f, 1024.0f, -0.25f};
    std::memcpy(b.f32(0), values, sizeof(values));
    auto cast = Cast("x", to);
    EXPECT_EQ(cast->OutputSchema(b.schema).fields[0].dtype, to);
    cast->Apply(b.schema, b.view, 0);
    const auto* out = reinterpret_cast<const uint16_t*>(b.view.fields[0]);
    for (int i = 0; i < 6; ++i) {
      const float back = to == DType::kFloat16 ? HalfToFloat(out[i]) : BFloat16ToFloat(out[i]);
      EXPECT_EQ(back, values[i]) << i;
    }
  }
}

TEST(Transforms, WideningCastWalksBackward) {
  Batch b(ParseSchema("x:float16[4]"), 1);
  auto* in = reinterpret_cast<uint16_t*>(b.view.fields[0]);
  for (int i = 0; i < 4; ++i) in[i] = FloatToHalf(static_cast<float>(i) + 0.5f);
  Cast("x", DType::kFloat32)->Apply(b.schema, b.view, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.f32(0)[i], static_cast<float>(i) + 0.5f);
}

TEST(Transforms, IntegerFieldsWidenToSignedTypesThatHoldEveryValue) {
  Batch b(ParseSchema("tokens:uint16[4]"), 2);
  const uint16_t values[8] = {0, 1, 65535, 40000, 7, 65534, 2, 3};
  std::memcpy(b.view.fields[0], values, sizeof(values));
  auto cast = ParseTransform("cast:tokens:int32");
  EXPECT_EQ(cast->OutputSchema(b.schema).fields[0].dtype, DType::kInt32);
  cast->Apply(b.schema, b.view, 0);
  const auto* out = reinterpret_cast<const int32_t*>(b.view.fields[0]);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], values[i]) << i;
  // int64 holds what int32 cannot promise for uint64; float targets need a floating field.
  EXPECT_THROW(ParseTransform("cast:x:int32")->OutputSchema(ParseSchema("x:uint64[2]")), Error);
  EXPECT_THROW(ParseTransform("cast:x:int32")->OutputSchema(ParseSchema("x:uint32[2]")), Error);
  EXPECT_THROW(ParseTransform("cast:x:float16")->OutputSchema(ParseSchema("x:int32[2]")), Error);
}

TEST(Transforms, NormalizeUsesMeanAndStd) {
  Batch b(ParseSchema("x:float32[2],y:int64"), 2);
  const float values[4] = {1.0f, 3.0f, 5.0f, 7.0f};
  std::memcpy(b.f32(0), values, sizeof(values));
  Normalize("x", 3.0f, 2.0f)->Apply(b.schema, b.view, 0);
  EXPECT_THAT(std::vector<float>(b.f32(0), b.f32(0) + 4), ::testing::ElementsAre(-1, 0, 1, 2));
}

TEST(Transforms, SpecAugmentMasksWithinBoundsAndIsSeeded) {
  const Schema schema = ParseSchema("mel:float32[1,16,10]");
  SpecAugmentOptions o;
  o.freq_masks = 1;
  o.max_freq = 4;
  o.time_masks = 1;
  o.max_time = 3;
  auto aug = SpecAugment("mel", o);
  const auto run = [&](uint64_t seed) {
    Batch b(schema, 4);
    for (int i = 0; i < 4 * 160; ++i) b.f32(0)[i] = 1.0f;
    aug->Apply(schema, b.view, seed);
    return std::vector<float>(b.f32(0), b.f32(0) + 4 * 160);
  };
  const auto a = run(11);
  EXPECT_EQ(a, run(11));
  EXPECT_NE(a, run(12));
  for (int row = 0; row < 4; ++row) {
    int zeros = 0;
    for (int i = 0; i < 160; ++i) zeros += a[static_cast<size_t>(row * 160 + i)] == 0.0f;
    // At most 4 frequency rows of 10 plus 3 frames of 16 are masked.
    EXPECT_LE(zeros, 4 * 10 + 3 * 16);
  }
}

TEST(Transforms, BadSpecsAndFieldsAreClearErrors) {
  EXPECT_THROW(ParseTransform("cast:mel"), Error);
  EXPECT_THROW(ParseTransform("blur:mel"), Error);
  EXPECT_THROW(ParseTransform("normalize:mel:x:1"), Error);
  EXPECT_THROW(Normalize("x", 0.0f, 0.0f), Error);
  try {
    Cast("label", DType::kFloat16)->OutputSchema(ParseSchema("label:int64"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'label' is int64"));
  }
  try {
    SpecAugment("x")->OutputSchema(ParseSchema("x:float32[5]"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[..., frequency, time]"));
  }
  EXPECT_EQ(ParseTransform("cast:mel:bfloat16")->name(), "cast(mel->bfloat16)");
}

}  // namespace
}  // namespace gpufeed
