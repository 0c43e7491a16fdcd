// Synthetic variable-length fields: lengths drawn per (seed, field, sample) from a spelled
// distribution, bounded, and items whose elements are SyntheticValue's, as for fixed fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "gpufeed/varlen.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {
    DType::kBool,     DType::kInt8,    DType::kInt16,   DType::kInt32,  DType::kInt64,
    DType::kUInt8,    DType::kUInt16,  DType::kUInt32,  DType::kUInt64, DType::kFloat16,
    DType::kBFloat16, DType::kFloat32, DType::kFloat64,
};

double Element(DType dtype, const std::byte* p) {
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return static_cast<double>(v);
  };
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
      return get(uint8_t{});
    case DType::kInt8:
      return get(int8_t{});
    case DType::kInt16:
      return get(int16_t{});
    case DType::kInt32:
      return get(int32_t{});
    case DType::kInt64:
      return get(int64_t{});
    case DType::kUInt16:
      return get(uint16_t{});
    case DType::kUInt32:
      return get(uint32_t{});
    case DType::kUInt64:
      return get(uint64_t{});
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    }
    case DType::kFloat32:
      return get(float{});
    case DType::kFloat64:
      return get(double{});
  }
  return 0;
}

TEST(SyntheticVarlenTest, ItemsHoldSyntheticValuesFromAnyFirstItem) {
  Schema schema;
  schema.fields.push_back({"label", DType::kInt64, {}});
  for (DType dtype : kAllDTypes) {
    schema.fields.push_back({std::string(DTypeName(dtype)), dtype, {kVariableDim, 3}});
  }
  const uint64_t seed = 11;
  auto source = OpenSynthetic(schema, 50, seed, ParseSyntheticLengths("uniform:0:40"));
  for (int f = 1; f < static_cast<int>(schema.fields.size()); ++f) {
    const DType dtype = schema.fields[static_cast<size_t>(f)].dtype;
    for (const int64_t sample : {0, 7, 49}) {
      const int64_t indices[1] = {sample};
      int64_t length = -1;
      source->ReadLengths(f, indices, {&length, 1}, nullptr);
      ASSERT_EQ(length, SyntheticLength(ParseSyntheticLengths("uniform:0:40"), seed, f, sample));
      for (const int64_t first : {int64_t{0}, length / 2}) {
        const size_t size = DTypeSize(dtype);
        std::vector<std::byte> out(static_cast<size_t>(length - first) * 3 * size);
        source->ReadItems(f, sample, first, out, nullptr);
        for (int64_t e = 0; e < (length - first) * 3; ++e) {
          ASSERT_EQ(Element(dtype, out.data() + e * size),
                    SyntheticValue(seed, f, sample, first * 3 + e, dtype))
              << DTypeName(dtype) << " sample " << sample << " element " << e;
        }
      }
    }
  }
}

TEST(SyntheticVarlenTest, LengthsFollowTheDistributionWithinItsBounds) {
  const SyntheticLengths uniform = ParseSyntheticLengths("uniform:3:6");
  std::vector<int64_t> seen(7, 0);
  for (int64_t s = 0; s < 4000; ++s) {
    const int64_t n = SyntheticLength(uniform, 1, 0, s);
    ASSERT_GE(n, 3);
    ASSERT_LE(n, 6);
    ++seen[static_cast<size_t>(n)];
  }
  for (int n = 3; n <= 6; ++n) EXPECT_GT(seen[static_cast<size_t>(n)], 800) << n;

  const SyntheticLengths lognormal = ParseSyntheticLengths("lognormal:400:0.5");
  EXPECT_GT(lognormal.max, 400);
  EXPECT_LT(lognormal.max, 40000);
  std::vector<int64_t> draws;
  for (int64_t s = 0; s < 10001; ++s) draws.push_back(SyntheticLength(lognormal, 2, 0, s));
  std::nth_element(draws.begin(), draws.begin() + 5000, draws.end());
  EXPECT_NEAR(static_cast<double>(draws[5000]), 400, 20);
  // Another seed or field draws other lengths; the same ones repeat.
  EXPECT_NE(SyntheticLength(lognormal, 2, 0, 5), SyntheticLength(lognormal, 3, 0, 5));
  EXPECT_EQ(SyntheticLength(lognormal, 2, 1, 5), SyntheticLength(lognormal, 2, 1, 5));

  const SyntheticLengths capped = ParseSyntheticLengths("lognormal:400:3:1000");
  for (int64_t s = 0; s < 2000; ++s) ASSERT_LE(SyntheticLength(capped, 4, 0, s), 1000);
}

TEST(SyntheticVarlenTest, DistributionsThatCouldPassTheBoundOrMeanNothingAreRefused) {
  for (const char* spec : {"uniform:5:1", "uniform:-1:3", "uniform:0:4294967296", "uniform:1.5:3",
                           "uniform:1", "lognormal:400:3", "lognormal:0:1", "lognormal:400:-1",
                           "lognormal:4:1:1e12", "gamma:1:2", "", "uniform:a:b"}) {
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { ParseSyntheticLengths(spec); }, &message),
              ErrorCode::kInvalidArgument)
        << spec;
    EXPECT_THAT(message, HasSubstr("uniform:MIN:MAX")) << spec;
  }
  std::string message;
  ErrorCodeOf([&] { ParseSyntheticLengths("lognormal:400:3"); }, &message);
  EXPECT_THAT(message, HasSubstr("give a MAX"));
}

TEST(SyntheticVarlenTest, AVariableFieldNeedsLengthsAndAFixedSchemaTakesNone) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenSynthetic(ParseSchema("tokens:int32[*]"), 4); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("give its lengths"));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenSynthetic(ParseSchema("x:int32[2]"), 4, 0,
                                ParseSyntheticLengths("uniform:1:2"));
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("no field"));
  // A longest sample past 63 bits of bytes.
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenSynthetic(ParseSchema("x:float64[*,1000000000000]"), 4, 0,
                            ParseSyntheticLengths("uniform:1:100000000"));
            }),
            ErrorCode::kInvalidArgument);
}

TEST(SyntheticVarlenTest, PaddedRowsHoldTheSamplesAndTheirLengths) {
  auto source = OpenSynthetic(ParseSchema("tokens:int32[*],label:int64"), 20, 5,
                              ParseSyntheticLengths("uniform:1:8"));
  auto padded = PadSequences(source, {.max_length = 8});
  std::vector<int32_t> rows(2 * 8, -1);
  int64_t labels[2] = {};
  int64_t lengths[2] = {};
  const int64_t indices[2] = {3, 12};
  const auto& schema = padded->schema();
  BatchView view{.fields = std::vector<std::byte*>(schema.fields.size()), .rows = 2};
  view.fields[static_cast<size_t>(schema.IndexOf("tokens"))] =
      reinterpret_cast<std::byte*>(rows.data());
  view.fields[static_cast<size_t>(schema.IndexOf("label"))] = reinterpret_cast<std::byte*>(labels);
  view.fields[static_cast<size_t>(schema.IndexOf("tokens_lengths"))] =
      reinterpret_cast<std::byte*>(lengths);
  padded->Read(indices, view, nullptr);
  const SyntheticLengths uniform = ParseSyntheticLengths("uniform:1:8");
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(lengths[r], SyntheticLength(uniform, 5, 0, indices[r]));
    for (int64_t e = 0; e < 8; ++e) {
      EXPECT_EQ(rows[r * 8 + static_cast<size_t>(e)],
                e < lengths[r] ? SyntheticValue(5, 0, indices[r], e, DType::kInt32) : 0);
    }
    EXPECT_EQ(labels[r], SyntheticValue(5, 1, indices[r], 0, DType::kInt64));
  }
}

}  // namespace
}  // namespace gpufeed
