// A NumPy variable-length field: values.npy + values.offsets.npy, read against the slices the
// offsets name, and hostile offsets refused at open naming the file and the sample.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <numeric>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "gpufeed/varlen.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

// tokens.npy: `items` rows of int32[2] (row r holds 2r, 2r + 1), offsets as `offsets_dtype`.
template <typename Offset>
void WriteRagged(const ScratchDir& dir, int64_t items, const std::vector<Offset>& offsets,
                 DType offsets_dtype, std::vector<int64_t> offsets_shape = {}) {
  std::vector<int32_t> values(static_cast<size_t>(items) * 2);
  std::iota(values.begin(), values.end(), 0);
  WriteNpy(dir.Path("tokens.npy"), {"tokens", DType::kInt32, {2}}, items, values.data());
  FieldSpec spec{"tokens.offsets", offsets_dtype, std::move(offsets_shape)};
  const auto rows = static_cast<int64_t>(offsets.size()) /
                    std::max<int64_t>(1, spec.shape.empty() ? 1 : spec.shape[0]);
  WriteNpy(dir.Path("tokens.offsets.npy"), spec, rows, offsets.data());
}

std::vector<int32_t> Items(const Source& source, int field, int64_t index, int64_t first = 0) {
  const int64_t indices[1] = {index};
  int64_t length = 0;
  source.ReadLengths(field, indices, {&length, 1}, nullptr);
  std::vector<int32_t> out(static_cast<size_t>((length - first) * 2));
  source.ReadItems(field, index, first, std::as_writable_bytes(std::span(out)), nullptr);
  return out;
}

TEST(NumpyRaggedTest, OffsetsMakeAVariableLengthFieldBesideFixedOnes) {
  for (const bool mmap : {true, false}) {
    ScratchDir dir;
    // Starts at row 1 (the first offset may be above 0); sample 1 is empty.
    WriteRagged<int64_t>(dir, 10, {1, 4, 4, 9}, DType::kInt64);
    const int64_t labels[3] = {7, 8, 9};
    WriteNpy(dir.Path("label.npy"), {"label", DType::kInt64, {}}, 3, labels);
    auto source = OpenNumpy(dir.path(), {.use_mmap = mmap});
    ASSERT_EQ(source->size(), 3);
    ASSERT_EQ(source->schema().fields.size(), 2u);
    EXPECT_EQ(source->schema().fields[0], (FieldSpec{"label", DType::kInt64, {}}));
    EXPECT_EQ(source->schema().fields[1], (FieldSpec{"tokens", DType::kInt32, {kVariableDim, 2}}));
    const int tokens = source->schema().IndexOf("tokens");
    const int64_t indices[3] = {2, 0, 1};
    int64_t lengths[3] = {};
    source->ReadLengths(tokens, indices, lengths, nullptr);
    EXPECT_THAT(lengths, ::testing::ElementsAre(5, 3, 0));
    EXPECT_EQ(Items(*source, tokens, 0), (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(Items(*source, tokens, 2, 3), (std::vector<int32_t>{14, 15, 16, 17}));
    EXPECT_TRUE(Items(*source, tokens, 1).empty());
    // The fixed field reads as before; the variable one's pointer is left alone.
    int64_t got[3] = {};
    source->Read(indices, {.fields = {reinterpret_cast<std::byte*>(got), nullptr}, .rows = 3},
                 nullptr);
    EXPECT_THAT(got, ::testing::ElementsAre(9, 7, 8));
  }
}

TEST(NumpyRaggedTest, AnyIntegerDTypeOfOffsetsWorksAndPadsThroughTheAdaptor) {
  ScratchDir dir;
  WriteRagged<uint16_t>(dir, 6, {0, 2, 6}, DType::kUInt16);
  auto source = OpenNumpy(dir.path(), {.fields = {"tokens"}});
  auto padded = PadSequences(source, {.max_length = 3});
  std::vector<int32_t> rows(2 * 3 * 2, -1);
  int64_t lengths[2] = {};
  const int64_t indices[2] = {0, 1};
  padded->Read(
      indices,
      {.fields = {reinterpret_cast<std::byte*>(rows.data()), reinterpret_cast<std::byte*>(lengths)},
       .rows = 2},
      nullptr);
  EXPECT_THAT(lengths, ::testing::ElementsAre(2, 3));
  EXPECT_EQ(rows, (std::vector<int32_t>{0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 8, 9}));
}

TEST(NumpyRaggedTest, HostileOffsetsAreCorruptDataNamingTheFileAndSample) {
  struct Case {
    std::vector<int64_t> offsets;
    const char* says;
  };
  for (const Case& c : {Case{{0, 3, 2, 5}, "offsets run backwards at sample 1 (2 after 3)"},
                        Case{{0, 3, 11}, "offset 2 (sample 1) is 11, outside the 10 rows"},
                        Case{{-1, 3}, "offset 0 (sample 0) is -1"}, Case{{}, "samples + 1"}}) {
    ScratchDir dir;
    WriteRagged<int64_t>(dir, 10, c.offsets, DType::kInt64);
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kCorruptData);
    EXPECT_THAT(message, HasSubstr("tokens.offsets.npy"));
    EXPECT_THAT(message, HasSubstr(c.says));
  }
}

TEST(NumpyRaggedTest, OffsetsBeyondInt64AreRefused) {
  ScratchDir dir;
  WriteRagged<uint64_t>(dir, 4, {0, std::numeric_limits<uint64_t>::max()}, DType::kUInt64);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("outside the 4 rows"));
}

TEST(NumpyRaggedTest, OffsetsThatAreNotOneDimensionOfIntegersAreRefused) {
  {
    ScratchDir dir;
    WriteRagged<float>(dir, 4, {0, 2, 4}, DType::kFloat32);
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kUnsupported);
    EXPECT_THAT(message, HasSubstr("must be integers"));
  }
  {
    ScratchDir dir;
    WriteRagged<int64_t>(dir, 4, {0, 2, 2, 4}, DType::kInt64, {2});  // shape (2, 2)
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path()); }, &message), ErrorCode::kCorruptData);
    EXPECT_THAT(message, HasSubstr("one dimension"));
  }
}

TEST(NumpyRaggedTest, SampleCountsMustAgreeAndTheOffsetsAreNoFieldOfTheirOwn) {
  ScratchDir dir;
  WriteRagged<int64_t>(dir, 10, {0, 4, 10}, DType::kInt64);
  const int64_t labels[3] = {1, 2, 3};
  WriteNpy(dir.Path("label.npy"), {"label", DType::kInt64, {}}, 3, labels);
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenNumpy(dir.path(), {.fields = {"tokens", "label"}});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("tokens.offsets.npy holds 2 samples"));
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir.path(), {.fields = {"tokens.offsets"}}); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("offsets of the variable-length field 'tokens'"));
}

TEST(NumpyRaggedTest, ReadsOutsideASampleAreRefused) {
  ScratchDir dir;
  WriteRagged<int64_t>(dir, 10, {0, 4, 10}, DType::kInt64);
  auto source = OpenNumpy(dir.path());
  std::vector<int32_t> out(2 * 5);
  EXPECT_EQ(ErrorCodeOf([&] {
              source->ReadItems(0, 0, 0, std::as_writable_bytes(std::span(out)), nullptr);
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] {
              source->ReadItems(0, 2, 0, std::as_writable_bytes(std::span(out)), nullptr);
            }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufeed
