// StackFields: several 1-D fields of any source (NumPy here, HDF5 in the Python suite) as
// one [B, K] field, read as each batch is built.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "gpufeed/stack.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr int64_t kRows = 300;
constexpr int kColumns = 12;

double Value(int64_t row, int k) { return row * 0.1 + k * 1.01; }

// A NumPy folder of 12 float64 fields c0..c11 and an int64 label, each [300].
class StackedSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int k = 0; k < kColumns; ++k) {
      std::vector<double> column(kRows);
      for (int64_t r = 0; r < kRows; ++r) column[r] = Value(r, k);
      WriteNpy(scratch_.Path(fmt::format("c{}.npy", k)),
               {fmt::format("c{}", k), DType::kFloat64, {}}, kRows, column.data());
    }
    std::vector<int64_t> label(kRows);
    std::iota(label.begin(), label.end(), 0);
    WriteNpy(scratch_.Path("label.npy"), {"label", DType::kInt64, {}}, kRows, label.data());
  }

  testing::ScratchDir scratch_;
};

TEST_F(StackedSourceTest, OneDimensionalFieldsBecomeOneBatchByKField) {
  const auto source = StackFields(OpenNumpy(scratch_.Path("")),
                                  {{.name = "x", .columns = {"c*"}, .dtype = DType::kFloat32},
                                   {.name = "y", .columns = {"label"}, .stack = false}});
  // The pattern matches in the source's field order (OpenNumpy: by name).
  EXPECT_EQ(source->schema().ToString(), "x: float32[12], y: int64[]");
  const auto inner = OpenNumpy(scratch_.Path(""));
  std::vector<int> order;
  for (const auto& f : inner->schema().fields) {
    if (f.name != "label") order.push_back(std::stoi(f.name.substr(1)));
  }
  Loader loader(source, {.batch_size = 64, .shuffle = true, .seed = 9, .workers = 2});
  std::vector<int> seen(kRows);
  while (auto batch = loader.Next()) {
    const float* x = batch->field("x").as<float>();
    const int64_t* y = batch->field("y").as<int64_t>();
    for (int64_t r = 0; r < batch->size(); ++r) {
      ++seen[y[r]];
      for (int k = 0; k < kColumns; ++k) {
        ASSERT_EQ(x[r * kColumns + k], static_cast<float>(Value(y[r], order[k])))
            << "row " << y[r] << " column " << k;
      }
    }
  }
  EXPECT_THAT(std::vector<int>(seen.begin(), seen.begin() + 3), ElementsAre(1, 1, 1));
  EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), kRows);
}

TEST_F(StackedSourceTest, ListedColumnsKeepTheirOrderAndTheirDtype) {
  const auto source =
      StackFields(OpenNumpy(scratch_.Path("")), {{.name = "x", .columns = {"c3", "c0", "c3"}}});
  EXPECT_EQ(source->schema().ToString(), "x: float64[3]");
  double x[6];
  source->Read(std::vector<int64_t>{5, 0}, {.fields = {reinterpret_cast<std::byte*>(x)}, .rows = 2},
               nullptr);
  EXPECT_THAT(
      x, ElementsAre(Value(5, 3), Value(5, 0), Value(5, 3), Value(0, 3), Value(0, 0), Value(0, 3)));
}

TEST_F(StackedSourceTest, ARefusedValueNamesTheFieldAndSample) {
  std::vector<double> big(kRows, 1.0);
  big[77] = 1e300;
  std::vector<int64_t> wide(kRows, 1);
  wide[12] = 1 << 20;
  const auto inner = OpenMemory({{{"a", DType::kFloat64, {}}, big.data(), kRows},
                                 {{"b", DType::kInt64, {}}, wide.data(), kRows}});
  const auto floats =
      StackFields(inner, {{.name = "x", .columns = {"a"}, .dtype = DType::kFloat32}});
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> x(kRows);
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  floats->Read(all,
                               {.fields = {reinterpret_cast<std::byte*>(x.data())}, .rows = kRows},
                               nullptr);
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("field 'a'"), HasSubstr("sample 77"),
                             HasSubstr("beyond float32's range")));
  const auto ints =
      StackFields(inner, {{.name = "y", .columns = {"b"}, .stack = false, .dtype = DType::kInt16}});
  std::vector<int16_t> y(kRows);
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  ints->Read(all,
                             {.fields = {reinterpret_cast<std::byte*>(y.data())}, .rows = kRows},
                             nullptr);
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("sample 12"), HasSubstr("1048576 does not fit int16")));
  // int64 into float32 must be exact: 2^24 + 1 is not.
  wide[12] = (1 << 24) + 1;
  const auto inexact =
      StackFields(inner, {{.name = "y", .columns = {"b"}, .dtype = DType::kFloat32}});
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  inexact->Read(all,
                                {.fields = {reinterpret_cast<std::byte*>(x.data())}, .rows = kRows},
                                nullptr);
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("16777217 has no exact float32"));
  // A NaN stays a NaN; an infinity stays one.
  big[77] = std::numeric_limits<double>::quiet_NaN();
  big[78] = -std::numeric_limits<double>::infinity();
  floats->Read(all, {.fields = {reinterpret_cast<std::byte*>(x.data())}, .rows = kRows}, nullptr);
  EXPECT_TRUE(std::isnan(x[77]));
  EXPECT_EQ(x[78], -std::numeric_limits<float>::infinity());
}

TEST_F(StackedSourceTest, SelectionsThatDoNotFitAreRefused) {
  const auto inner = OpenNumpy(scratch_.Path(""));
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { StackFields(inner, {{.name = "x", .columns = {"z*"}}}); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, AllOf(HasSubstr("'z*' matches no column"), HasSubstr("label")));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  StackFields(inner, {{.name = "x", .columns = {"c0", "label"}}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("different dtypes"));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  StackFields(inner,
                              {{.name = "x", .columns = {"c0"}}, {.name = "x", .columns = {"c1"}}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("field 'x' given twice"));
  EXPECT_EQ(ErrorCodeOf([&] { StackFields(inner, {}); }, &message), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufeed
