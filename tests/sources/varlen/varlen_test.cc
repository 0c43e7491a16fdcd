// Variable-length fields: the schema's `*`, ragged memory, and the padding and packing
// adaptors, checked against the samples they are made of.
#include "gpufeed/varlen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// Samples 0..n-1 of int32 tokens, sample i of `lengths[i]` tokens valued 1000 * i + j + 1.
struct Corpus {
  std::vector<int32_t> values;
  std::vector<int64_t> offsets{0};
  std::shared_ptr<Source> source;

  explicit Corpus(const std::vector<int64_t>& lengths, bool with_label = false) {
    for (size_t i = 0; i < lengths.size(); ++i) {
      for (int64_t j = 0; j < lengths[i]; ++j)
        values.push_back(static_cast<int32_t>(1000 * i + j + 1));
      offsets.push_back(static_cast<int64_t>(values.size()));
    }
    labels.resize(lengths.size());
    std::iota(labels.begin(), labels.end(), int64_t{7});
    std::vector<MemoryField> fixed;
    if (with_label) {
      fixed.push_back({FieldSpec{"label", DType::kInt64, {}}, labels.data(),
                       static_cast<int64_t>(lengths.size())});
    }
    source = OpenRagged({{.spec = {"tokens", DType::kInt32, {kVariableDim}},
                          .values = values.data(),
                          .items = static_cast<int64_t>(values.size()),
                          .offsets = offsets.data(),
                          .samples = static_cast<int64_t>(lengths.size())}},
                        std::move(fixed));
  }
  std::vector<int64_t> labels;
  std::vector<int32_t> Sample(int64_t i) const {
    return {values.begin() + offsets[i], values.begin() + offsets[i + 1]};
  }
};

// All rows of `source`, read through ReadSeeded with `seed`, as one buffer per field.
std::vector<std::vector<std::byte>> ReadAll(const Source& source, uint64_t seed = 0) {
  std::vector<std::vector<std::byte>> fields;
  BatchView view{.rows = source.size()};
  for (const FieldSpec& f : source.schema().fields) {
    fields.emplace_back(f.SampleBytes() * static_cast<size_t>(source.size()));
    view.fields.push_back(fields.back().data());
  }
  std::vector<int64_t> indices(static_cast<size_t>(source.size()));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  source.ReadSeeded(indices, view, nullptr, seed);
  return fields;
}

template <typename T>
const T* As(const std::vector<std::byte>& bytes) {
  return reinterpret_cast<const T*>(bytes.data());
}

TEST(VarlenSchemaTest, ParsesAndPrintsAVariableFirstDimension) {
  const Schema schema = ParseSchema("tokens:int32[*],boxes:float32[*,4],label:int64[]");
  EXPECT_TRUE(schema.fields[0].variable());
  EXPECT_TRUE(schema.fields[1].variable());
  EXPECT_FALSE(schema.fields[2].variable());
  EXPECT_TRUE(schema.HasVariable());
  EXPECT_EQ(schema.fields[1].ItemBytes(), 16u);
  EXPECT_EQ(schema.fields[0].ToString(), "tokens: int32[*]");
  EXPECT_EQ(schema.fields[1].ToString(), "boxes: float32[*,4]");
  try {
    (void)schema.fields[0].SampleBytes();
    FAIL() << "a variable-length field has no sample size";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("tokens: int32[*] is variable-length"), std::string::npos);
  }
  EXPECT_THROW(ParseSchema("x:int32[3,*]"), Error);
}

TEST(RaggedSourceTest, RefusesOffsetsThatRunBackwardsOrPastTheValues) {
  std::vector<int32_t> values(10);
  for (const std::vector<int64_t>& offsets :
       {std::vector<int64_t>{0, 5, 3, 10}, std::vector<int64_t>{0, 5, 11, 11},
        std::vector<int64_t>{-1, 5, 6, 10}}) {
    try {
      OpenRagged({{.spec = {"tokens", DType::kInt32, {kVariableDim}},
                   .values = values.data(),
                   .items = 10,
                   .offsets = offsets.data(),
                   .samples = 3}});
      FAIL() << "bad offsets accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
      EXPECT_NE(std::string(e.what()).find("'tokens'"), std::string::npos) << e.what();
    }
  }
}

TEST(PadSequencesTest, PadsCutsAndCountsEverySample) {
  Corpus corpus({3, 0, 7, 5}, /*with_label=*/true);
  auto padded = PadSequences(corpus.source, {.max_length = 5, .pad_value = -1});
  ASSERT_EQ(padded->schema().ToString(),
            "tokens: int32[5], tokens_lengths: int64[], label: int64[]");
  const auto fields = ReadAll(*padded);
  for (int64_t i = 0; i < 4; ++i) {
    const auto sample = corpus.Sample(i);
    const int64_t kept = std::min<int64_t>(5, static_cast<int64_t>(sample.size()));
    EXPECT_EQ(As<int64_t>(fields[1])[i], kept);
    EXPECT_EQ(As<int64_t>(fields[2])[i], 7 + i);
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(As<int32_t>(fields[0])[i * 5 + j], j < kept ? sample[j] : -1) << i << "," << j;
    }
  }
  const VarlenStats stats = *VarlenStatsOf(*padded);
  EXPECT_EQ(stats.items, 3 + 0 + 5 + 5);
  EXPECT_EQ(stats.truncated_items, 2);
  EXPECT_EQ(stats.pad_items, 20 - 13);

  auto left = PadSequences(corpus.source, {.max_length = 5, .truncate_left = true});
  const auto cut = ReadAll(*left);
  EXPECT_EQ(As<int32_t>(cut[0])[10], corpus.Sample(2)[2]);  // the last five of seven
  auto longest = PadSequences(corpus.source, {.pad_to_multiple_of = 4});
  EXPECT_EQ(longest->schema().fields[0].shape, std::vector<int64_t>{8});
  EXPECT_THROW(PadSequences(corpus.source, {.max_length = 4, .pad_value = 1e10}), Error);
}

TEST(PackSequencesTest, TheStreamHoldsEveryTokenOnceInOrder) {
  const std::vector<int64_t> lengths = {5, 0, 9, 1, 4, 3};
  Corpus corpus(lengths);
  auto packed = PackSequences(corpus.source, {.length = 4});
  EXPECT_EQ(packed->size(), 6);  // 22 tokens in rows of 4
  const auto fields = ReadAll(*packed);
  std::vector<int32_t> stream;
  for (int64_t r = 0; r < packed->size(); ++r) {
    const int64_t real = As<int64_t>(fields[3])[r];
    for (int64_t j = 0; j < real; ++j) stream.push_back(As<int32_t>(fields[0])[r * 4 + j]);
    for (int64_t j = real; j < 4; ++j) {
      EXPECT_EQ(As<int32_t>(fields[0])[r * 4 + j], 0);
      EXPECT_EQ(As<int32_t>(fields[2])[r * 4 + j], -1);
    }
  }
  EXPECT_EQ(stream, corpus.values);
  // Row 1 holds the last token of sample 0 and three of sample 2: positions restart there.
  EXPECT_EQ(std::vector<int32_t>(As<int32_t>(fields[1]) + 4, As<int32_t>(fields[1]) + 8),
            (std::vector<int32_t>{0, 0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(As<int32_t>(fields[2]) + 4, As<int32_t>(fields[2]) + 8),
            (std::vector<int32_t>{0, 1, 1, 1}));
  const VarlenStats stats = *VarlenStatsOf(*packed);
  EXPECT_EQ(stats.items, 22);
  EXPECT_EQ(stats.pad_items, 2);
}

TEST(PackSequencesTest, AnEosFollowsEverySample) {
  Corpus corpus({2, 3});
  auto packed = PackSequences(corpus.source, {.length = 3, .eos = 99});
  const auto fields = ReadAll(*packed);
  const int32_t* v = As<int32_t>(fields[0]);
  EXPECT_EQ(std::vector<int32_t>(v, v + 7), (std::vector<int32_t>{1, 2, 99, 1001, 1002, 1003, 99}));
}

TEST(PackSequencesTest, AShuffledStreamIsAPermutationOfSamplesThatTheSeedFixes) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 200; ++i) lengths.push_back((i * 37) % 23);
  Corpus corpus(lengths);
  auto packed = PackSequences(corpus.source, {.length = 16, .shuffle = true});
  EXPECT_FALSE(packed->rows_repeat());
  auto tokens_of = [&](uint64_t seed) {
    const auto fields = ReadAll(*packed, seed);
    std::vector<int32_t> stream;
    for (int64_t r = 0; r < packed->size(); ++r) {
      for (int64_t j = 0; j < As<int64_t>(fields[3])[r]; ++j) {
        stream.push_back(As<int32_t>(fields[0])[r * 16 + j]);
      }
    }
    return stream;
  };
  const auto a = tokens_of(1);
  EXPECT_EQ(a, tokens_of(1));
  EXPECT_NE(a, tokens_of(2));
  auto sorted = a;
  auto expected = corpus.values;
  std::sort(sorted.begin(), sorted.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(sorted, expected);
}

TEST(PackSequencesTest, WholeSamplesAreBinPackedOnceEach) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 300; ++i) lengths.push_back(1 + (i * 53) % 40);
  lengths.push_back(70);  // longer than a row: its first 50 are kept
  Corpus corpus(lengths);
  auto packed = PackSequences(corpus.source, {.length = 50, .split = false, .window = 64});
  const auto fields = ReadAll(*packed);
  std::map<int32_t, std::vector<int32_t>> seen;  // first token / 1000 -> tokens
  for (int64_t r = 0; r < packed->size(); ++r) {
    const int32_t* v = As<int32_t>(fields[0]) + r * 50;
    const int32_t* d = As<int32_t>(fields[2]) + r * 50;
    for (int64_t j = 0; j < As<int64_t>(fields[3])[r]; ++j) {
      ASSERT_GE(d[j], 0);
      seen[(v[j] - 1) / 1000].push_back(v[j]);
    }
  }
  ASSERT_EQ(seen.size(), lengths.size());
  for (const auto& [sample, tokens] : seen) {
    auto expected = corpus.Sample(sample);
    if (expected.size() > 50) expected.resize(50);
    EXPECT_EQ(tokens, expected) << "sample " << sample;
  }
  const VarlenStats stats = *VarlenStatsOf(*packed);
  EXPECT_EQ(stats.truncated_items, 20);
  EXPECT_GT(stats.fill(), 0.95);
}

// A source whose lengths lie: 2^62 items of int32 do not fit 63 bits of bytes.
class LyingSource final : public Source {
 public:
  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return 2; }
  std::string Describe() const override { return "lying"; }
  std::string Identity() const override { return "lying"; }
  void Read(std::span<const int64_t>, const BatchView&, SourceWorkerState*) const override {}
  void ReadLengths(int, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState*) const override {
    for (size_t i = 0; i < indices.size(); ++i) lengths[i] = int64_t{1} << 62;
  }

 private:
  Schema schema_ = ParseSchema("tokens:int32[*]");
};

TEST(PackSequencesTest, RefusesLengthsPastWhatBytesCanCount) {
  try {
    PackSequences(std::make_shared<LyingSource>(), {.length = 8});
    FAIL() << "accepted 2^62 int32 items";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("sample 0"), std::string::npos) << e.what();
  }
}

TEST(PackSequencesTest, RefusesASourceWithoutAVariableField) {
  auto fixed = OpenSynthetic(ParseSchema("x:float32[4]"), 10);
  EXPECT_THROW(PackSequences(fixed, {.length = 4}), Error);
  EXPECT_THROW(PadSequences(fixed), Error);
}

}  // namespace
}  // namespace gpufeed
