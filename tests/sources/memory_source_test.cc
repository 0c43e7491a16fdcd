#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::ElementsAre;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

TEST(MemorySourceTest, ReadsRowsOfCallerMemoryInTheOrderAsked) {
  std::vector<float> x(10 * 3);
  std::iota(x.begin(), x.end(), 0.0f);
  std::vector<int64_t> y{0, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  const auto source = OpenMemory(
      {{{"x", DType::kFloat32, {3}}, x.data(), 10}, {{"y", DType::kInt64, {}}, y.data(), 10}});
  EXPECT_EQ(source->size(), 10);
  EXPECT_EQ(source->schema().fields[0].ToString(), "x: float32[3]");
  const std::vector<int64_t> indices{9, 2, 2, 0};
  std::vector<float> got_x(indices.size() * 3);
  std::vector<int64_t> got_y(indices.size());
  source->Read(indices,
               {.fields = {reinterpret_cast<std::byte*>(got_x.data()),
                           reinterpret_cast<std::byte*>(got_y.data())},
                .rows = 4},
               nullptr);
  EXPECT_THAT(got_x, ElementsAre(27, 28, 29, 6, 7, 8, 6, 7, 8, 0, 1, 2));
  EXPECT_THAT(got_y, ElementsAre(90, 20, 20, 0));
  // Zero-copy: the source reads the caller's memory as it is now.
  x[0] = -1;
  source->Read(std::vector<int64_t>{0},
               {.fields = {reinterpret_cast<std::byte*>(got_x.data()),
                           reinterpret_cast<std::byte*>(got_y.data())},
                .rows = 1},
               nullptr);
  EXPECT_EQ(got_x[0], -1);
}

TEST(MemorySourceTest, KeepsTheOwnerAliveAsLongAsItLives) {
  auto data = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{5, 6, 7});
  std::weak_ptr<std::vector<int32_t>> watch = data;
  auto source = OpenMemory({{{"v", DType::kInt32, {}}, data->data(), 3}}, data);
  data.reset();
  EXPECT_FALSE(watch.expired());
  int32_t got = 0;
  source->Read(std::vector<int64_t>{2}, {.fields = {reinterpret_cast<std::byte*>(&got)}, .rows = 1},
               nullptr);
  EXPECT_EQ(got, 7);
  source.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(MemorySourceTest, RejectsBadFields) {
  std::vector<int8_t> a(4), b(5);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([] { OpenMemory({}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenMemory({{{"a", DType::kInt8, {}}, nullptr, 4}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("'a'"));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenMemory({{{"a", DType::kInt8, {}}, a.data(), 4},
                              {{"b", DType::kInt8, {}}, b.data(), 5}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("'b' has 5"));
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenMemory(
                  {{{"a", DType::kInt8, {}}, a.data(), 4}, {{"a", DType::kInt8, {}}, a.data(), 4}});
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenMemory({{{"a", DType::kInt8, {}}, a.data(), -1}});
            }),
            ErrorCode::kInvalidArgument);
  // An empty array may have no storage at all.
  EXPECT_EQ(OpenMemory({{{"a", DType::kInt8, {}}, nullptr, 0}})->size(), 0);
}

TEST(MemorySourceTest, OutOfRangeIndexIsInvalidArgument) {
  std::vector<int8_t> a(4);
  const auto source = OpenMemory({{{"a", DType::kInt8, {}}, a.data(), 4}});
  int8_t got;
  EXPECT_EQ(ErrorCodeOf([&] {
              source->Read(std::vector<int64_t>{4},
                           {.fields = {reinterpret_cast<std::byte*>(&got)}, .rows = 1}, nullptr);
            }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufeed
