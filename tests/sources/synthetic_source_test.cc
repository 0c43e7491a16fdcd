#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {
    DType::kBool,     DType::kInt8,    DType::kInt16,   DType::kInt32,  DType::kInt64,
    DType::kUInt8,    DType::kUInt16,  DType::kUInt32,  DType::kUInt64, DType::kFloat16,
    DType::kBFloat16, DType::kFloat32, DType::kFloat64,
};

// Element `e` of a row as a double, decoded per dtype.
double Element(DType dtype, const std::byte* row, int64_t e) {
  const std::byte* p = row + static_cast<size_t>(e) * DTypeSize(dtype);
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (dtype) {
    case DType::kBool:
      return get(uint8_t{});
    case DType::kInt8:
      return get(int8_t{});
    case DType::kInt16:
      return get(int16_t{});
    case DType::kInt32:
      return get(int32_t{});
    case DType::kInt64:
      return static_cast<double>(get(int64_t{}));
    case DType::kUInt8:
      return get(uint8_t{});
    case DType::kUInt16:
      return get(uint16_t{});
    case DType::kUInt32:
      return get(uint32_t{});
    case DType::kUInt64:
      return static_cast<double>(get(uint64_t{}));
    case DType::kFloat16:
      return HalfToFloat(get(uint16_t{}));
    case DType::kBFloat16:
      return BFloat16ToFloat(get(uint16_t{}));
    case DType::kFloat32:
      return get(float{});
    case DType::kFloat64:
      return get(double{});
  }
  return 0;
}

Schema AllDTypesSchema() {
  Schema schema;
  for (DType dtype : kAllDTypes) {
    schema.fields.push_back({std::string(DTypeName(dtype)), dtype, {3, 5}});
  }
  return schema;
}

std::vector<std::vector<std::byte>> ReadAll(const Source& source,
                                            const std::vector<int64_t>& indices) {
  std::vector<std::vector<std::byte>> buffers;
  BatchView view{.rows = static_cast<int64_t>(indices.size())};
  for (const auto& f : source.schema().fields) {
    buffers.emplace_back(f.SampleBytes() * indices.size());
  }
  for (auto& b : buffers) view.fields.push_back(b.data());
  source.Read(indices, view, nullptr);
  return buffers;
}

TEST(SyntheticSourceTest, SyntheticValueIsExactlyWhatReadStores) {
  const Schema schema = AllDTypesSchema();
  const auto source = OpenSynthetic(schema, 1000, 42);
  const std::vector<int64_t> indices{999, 0, 17, 17, 500};
  const auto data = ReadAll(*source, indices);
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const DType dtype = schema.fields[f].dtype;
    int distinct = 0;
    double first = 0;
    for (size_t r = 0; r < indices.size(); ++r) {
      const std::byte* row = data[f].data() + r * schema.fields[f].SampleBytes();
      for (int64_t e = 0; e < 15; ++e) {
        const double want = SyntheticValue(42, static_cast<int>(f), indices[r], e, dtype);
        ASSERT_EQ(Element(dtype, row, e), want)
            << DTypeName(dtype) << " sample " << indices[r] << " element " << e;
        if (r == 0 && e == 0) first = want;
        distinct += want != first;
        if (IsFloating(dtype)) {
          EXPECT_GE(want, -1.0);
          EXPECT_LT(want, 1.0);
        } else if (dtype == DType::kBool) {
          EXPECT_TRUE(want == 0 || want == 1);
        } else if (dtype == DType::kInt64) {
          EXPECT_GE(want, 0);
          EXPECT_LT(want, 1000);
        }
      }
    }
    EXPECT_GT(distinct, 10) << DTypeName(dtype) << ": values should vary";
  }
}

TEST(SyntheticSourceTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const Schema schema = ParseSchema("mel:float32[1,64,32],label:int64[]");
  const std::vector<int64_t> indices{3, 1, 4, 1, 5, 9, 2, 6};
  const auto a = ReadAll(*OpenSynthetic(schema, 10, 7), indices);
  const auto b = ReadAll(*OpenSynthetic(schema, 10, 7), indices);
  const auto c = ReadAll(*OpenSynthetic(schema, 10, 8), indices);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], c[0]);
  EXPECT_NE(a[1], c[1]);
  // A row depends on its sample only, not on its place in the batch: rows 1 and 3 (sample 1).
  const size_t rb = schema.fields[0].SampleBytes();
  EXPECT_TRUE(std::equal(a[0].begin() + rb, a[0].begin() + 2 * rb, a[0].begin() + 3 * rb));
  EXPECT_FALSE(std::equal(a[0].begin(), a[0].begin() + rb, a[0].begin() + rb));
}

TEST(SyntheticSourceTest, DescribesItself) {
  const auto source = OpenSynthetic(ParseSchema("x:float16[2],y:bool[]"), 123, 9);
  EXPECT_EQ(source->size(), 123);
  EXPECT_EQ(source->Identity(), "synthetic:x: float16[2], y: bool[]:123:9");
  EXPECT_THAT(source->Describe(), HasSubstr("123 samples"));
  EXPECT_EQ(source->PreferredBlock(), 1);
}

TEST(SyntheticSourceTest, RejectsNonsense) {
  EXPECT_EQ(ErrorCodeOf([] { OpenSynthetic(ParseSchema("x:float32[]"), -1); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([] { OpenSynthetic(Schema{}, 10); }), ErrorCode::kInvalidArgument);
  Schema twice;
  twice.fields = {{"x", DType::kInt8, {}}, {"x", DType::kInt8, {}}};
  EXPECT_EQ(ErrorCodeOf([&] { OpenSynthetic(twice, 10); }), ErrorCode::kInvalidArgument);
  const auto source = OpenSynthetic(ParseSchema("x:float32[]"), 10);
  std::vector<std::byte> buf(4);
  const std::vector<int64_t> out_of_range{10};
  EXPECT_EQ(ErrorCodeOf(
                [&] { source->Read(out_of_range, {.fields = {buf.data()}, .rows = 1}, nullptr); }),
            ErrorCode::kInvalidArgument);
}

TEST(SyntheticSourceTest, ManyThreadsReadTheSameBytes) {
  const auto source = OpenSynthetic(ParseSchema("x:float32[128],y:int64[]"), 100000, 1);
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < 256; ++i) indices.push_back((i * 7919) % 100000);
  const auto expected = ReadAll(*source, indices);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int b = 0; b < 10; ++b) bad += ReadAll(*source, indices) != expected;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace gpufeed
