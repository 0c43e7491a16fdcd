// The synthetic source: deterministic data of any schema, computed on the fly. Benchmarks use
// it to measure the loader without I/O, so Read writes values straight into the batch with no
// per-element dispatch, and one 64-bit hash feeds several narrow elements.
//
// Every element is a function of (seed, field, sample, element) through splitmix64's mixer:
// element e of a row takes the `kBits`-bit chunk number e % (64 / kBits) of the hash of
// e / (64 / kBits). Floating values are drawn on a grid that the dtype represents exactly
// (k / 2^(p-1) for a p-bit significand), so what SyntheticValue returns is bit-for-bit what
// Read stores, for float16 and bfloat16 too: float16 values are multiples of 2^-10 and
// bfloat16 values multiples of 2^-7 in [-1, 1).
#include <fmt/format.h>

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "core/splitmix.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

constexpr uint64_t kSampleStep = 0xd1b54a32d192ed03ull;

inline uint64_t FieldKey(uint64_t seed, int field) {
  return SplitMixFinalize(seed ^ (static_cast<uint64_t>(field) + 1) * kSplitMixGamma);
}
inline uint64_t RowKey(uint64_t field_key, int64_t sample) {
  return SplitMixFinalize(field_key + static_cast<uint64_t>(sample) * kSampleStep);
}
inline uint64_t WordHash(uint64_t row_key, int64_t word) {
  return SplitMixFinalize(row_key + (static_cast<uint64_t>(word) + 1) * kSplitMixGamma);
}

// Bits of hash each element of `dtype` consumes.
constexpr int ChunkBits(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8:
      return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 16;
    case DType::kFloat64:
      return 64;
    default:
      return 32;
  }
}

// The value on a grid of `kBits` significant bits from the chunk's low bits:
// [-2^(kBits-1), 2^(kBits-1)) / 2^(kBits-1), i.e. [-1, 1).
template <int kBits>
inline int64_t Grid(uint64_t chunk) {
  return static_cast<int64_t>(chunk & ((uint64_t{1} << kBits) - 1)) - (int64_t{1} << (kBits - 1));
}
template <int kBits>
inline double GridValue(uint64_t chunk) {
  return static_cast<double>(Grid<kBits>(chunk)) / static_cast<double>(int64_t{1} << (kBits - 1));
}

// Half and bfloat16 bit patterns of every grid point, made once with dtype.h's converters so
// Read and SyntheticValue cannot disagree with the rest of gpufeed.
template <int kBits, uint16_t (*kConvert)(float)>
const std::array<uint16_t, (1 << kBits)>& GridTable() {
  static const auto table = [] {
    std::array<uint16_t, (1 << kBits)> t{};
    for (size_t i = 0; i < t.size(); ++i) {
      const auto grid = static_cast<int64_t>(i) - (int64_t{1} << (kBits - 1));
      t[i] = kConvert(static_cast<float>(grid) / static_cast<float>(1 << (kBits - 1)));
    }
    return t;
  }();
  return table;
}

// The value stored for `chunk`, as a double. Integers stay in small ranges so sums and
// embeddings built on them stay sane; int64 is label-like (class ids 0..999).
double ValueOf(DType dtype, uint64_t chunk) {
  switch (dtype) {
    case DType::kBool:
      return static_cast<double>(chunk & 1);
    case DType::kInt8:
      return static_cast<double>(static_cast<int64_t>(chunk) - 128);
    case DType::kUInt8:
      return static_cast<double>(chunk);
    case DType::kInt16:
    case DType::kInt32:
      return static_cast<double>(static_cast<int64_t>(chunk % 2000) - 1000);
    case DType::kInt64:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return static_cast<double>(chunk % 1000);
    case DType::kFloat16:
      return GridValue<11>(chunk);
    case DType::kBFloat16:
      return GridValue<8>(chunk);
    case DType::kFloat32:
      return GridValue<24>(chunk);
    case DType::kFloat64:
      return GridValue<53>(chunk >> 11);
  }
  GPUFEED_ASSERT(false, "unknown dtype");
}

// Fills one field; `store(chunk)` turns a chunk of kBits into the element, inlined.
template <typename T, int kBits, typename Store>
void FillField(std::span<const int64_t> indices, uint64_t field_key, int64_t elements,
               std::byte* out, Store store) {
  constexpr int64_t kPerWord = 64 / kBits;
  constexpr uint64_t kMask = kBits == 64 ? ~uint64_t{0} : (uint64_t{1} << kBits) - 1;
  T* dst = reinterpret_cast<T*>(out);
  const int64_t full_words = elements / kPerWord;
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint64_t row_key = RowKey(field_key, indices[i]);
    T* row = dst + static_cast<int64_t>(i) * elements;
    for (int64_t w = 0; w < full_words; ++w) {
      const uint64_t h = WordHash(row_key, w);
      for (int64_t j = 0; j < kPerWord; ++j) {
        row[w * kPerWord + j] = store((h >> (j * kBits)) & kMask);
      }
    }
    if (full_words * kPerWord < elements) {
      const uint64_t h = WordHash(row_key, full_words);
      for (int64_t e = full_words * kPerWord, j = 0; e < elements; ++e, ++j) {
        row[e] = store((h >> (j * kBits)) & kMask);
      }
    }
  }
}

// The one-byte dtypes, a word at a time: byte j of a little-endian word is chunk j, so
// (h ^ flip) & keep stores eight elements at once (int8's c - 128 is c ^ 0x80 in two's
// complement; bool keeps bit 0).
static_assert(std::endian::native == std::endian::little, "chunks are taken little-endian");
void FillBytes(std::span<const int64_t> indices, uint64_t field_key, int64_t elements,
               std::byte* out, uint64_t flip, uint64_t keep) {
  const int64_t full_words = elements / 8;
  const auto tail = static_cast<size_t>(elements % 8);
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint64_t row_key = RowKey(field_key, indices[i]);
    std::byte* row = out + static_cast<int64_t>(i) * elements;
    for (int64_t w = 0; w < full_words; ++w) {
      const uint64_t v = (WordHash(row_key, w) ^ flip) & keep;
      std::memcpy(row + w * 8, &v, 8);
    }
    if (tail > 0) {
      const uint64_t v = (WordHash(row_key, full_words) ^ flip) & keep;
      std::memcpy(row + full_words * 8, &v, tail);
    }
  }
}

void FillField(DType dtype, std::span<const int64_t> indices, uint64_t key, int64_t elements,
               std::byte* out) {
  static_assert(ChunkBits(DType::kFloat32) == 32 && ChunkBits(DType::kInt64) == 32);
  switch (dtype) {
    case DType::kBool:
      return FillBytes(indices, key, elements, out, 0, 0x0101010101010101ull);
    case DType::kInt8:
      return FillBytes(indices, key, elements, out, 0x8080808080808080ull, ~uint64_t{0});
    case DType::kUInt8:
      return FillBytes(indices, key, elements, out, 0, ~uint64_t{0});
    case DType::kInt16:
      return FillField<int16_t, 32>(indices, key, elements, out, [](uint64_t c) {
        return static_cast<int16_t>(static_cast<int64_t>(c % 2000) - 1000);
      });
    case DType::kInt32:
      return FillField<int32_t, 32>(indices, key, elements, out, [](uint64_t c) {
        return static_cast<int32_t>(static_cast<int64_t>(c % 2000) - 1000);
      });
    case DType::kInt64:
      return FillField<int64_t, 32>(indices, key, elements, out,
                                    [](uint64_t c) { return static_cast<int64_t>(c % 1000); });
    case DType::kUInt16:
      return FillField<uint16_t, 32>(indices, key, elements, out,
                                     [](uint64_t c) { return static_cast<uint16_t>(c % 1000); });
    case DType::kUInt32:
      return FillField<uint32_t, 32>(indices, key, elements, out,
                                     [](uint64_t c) { return static_cast<uint32_t>(c % 1000); });
    case DType::kUInt64:
      return FillField<uint64_t, 32>(indices, key, elements, out,
                                     [](uint64_t c) { return c % 1000; });
    case DType::kFloat16: {
      const auto& table = GridTable<11, FloatToHalf>();
      return FillField<uint16_t, 16>(indices, key, elements, out,
                                     [&table](uint64_t c) { return table[c & 0x7ff]; });
    }
    case DType::kBFloat16: {
      const auto& table = GridTable<8, FloatToBFloat16>();
      return FillField<uint16_t, 16>(indices, key, elements, out,
                                     [&table](uint64_t c) { return table[c & 0xff]; });
    }
    case DType::kFloat32:
      return FillField<float, 32>(indices, key, elements, out, [](uint64_t c) {
        return static_cast<float>(Grid<24>(c)) * (1.0f / (1 << 23));
      });
    case DType::kFloat64:
      return FillField<double, 64>(indices, key, elements, out, [](uint64_t c) {
        return static_cast<double>(Grid<53>(c >> 11)) * (1.0 / (int64_t{1} << 52));
      });
  }
  GPUFEED_ASSERT(false, "unknown dtype");
}

// Elements [first, first + count) of the row keyed `row_key`, as FillField stores them.
template <typename T, int kBits, typename Store>
void FillRange(uint64_t row_key, int64_t first, int64_t count, std::byte* out, Store store) {
  constexpr int64_t kPerWord = 64 / kBits;
  constexpr uint64_t kMask = kBits == 64 ? ~uint64_t{0} : (uint64_t{1} << kBits) - 1;
  T* dst = reinterpret_cast<T*>(out);
  int64_t word = first / kPerWord;
  int64_t j = first % kPerWord;
  uint64_t h = WordHash(row_key, word);
  for (int64_t e = 0; e < count; ++e) {
    if (j == kPerWord) {
      h = WordHash(row_key, ++word);
      j = 0;
    }
    dst[e] = store((h >> (j * kBits)) & kMask);
    ++j;
  }
}

// Elements [first, first + count) of a variable-length sample, the values SyntheticValue
// gives: each dtype's chunk as ValueOf reads it, converted as Read converts it.
void FillItemRange(DType dtype, uint64_t row_key, int64_t first, int64_t count, std::byte* out) {
  auto as = [&]<typename T, int kBits>(auto store) {
    FillRange<T, kBits>(row_key, first, count, out, store);
  };
  switch (dtype) {
    case DType::kFloat16: {
      const auto& table = GridTable<11, FloatToHalf>();
      return as.operator()<uint16_t, 16>([&table](uint64_t c) { return table[c & 0x7ff]; });
    }
    case DType::kBFloat16: {
      const auto& table = GridTable<8, FloatToBFloat16>();
      return as.operator()<uint16_t, 16>([&table](uint64_t c) { return table[c & 0xff]; });
    }
    case DType::kFloat32:
      return as.operator()<float, 32>(
          [](uint64_t c) { return static_cast<float>(Grid<24>(c)) * (1.0f / (1 << 23)); });
    case DType::kFloat64:
      return as.operator()<double, 64>([](uint64_t c) {
        return static_cast<double>(Grid<53>(c >> 11)) * (1.0 / (int64_t{1} << 52));
      });
    case DType::kBool:
      return as.operator()<uint8_t, 8>([](uint64_t c) { return static_cast<uint8_t>(c & 1); });
    case DType::kInt8:  // c - 128 in two's complement
      return as.operator()<uint8_t, 8>([](uint64_t c) { return static_cast<uint8_t>(c ^ 0x80); });
    case DType::kUInt8:
      return as.operator()<uint8_t, 8>([](uint64_t c) { return static_cast<uint8_t>(c); });
    case DType::kInt16:
      return as.operator()<int16_t, 32>(
          [](uint64_t c) { return static_cast<int16_t>(static_cast<int64_t>(c % 2000) - 1000); });
    case DType::kInt32:
      return as.operator()<int32_t, 32>(
          [](uint64_t c) { return static_cast<int32_t>(static_cast<int64_t>(c % 2000) - 1000); });
    case DType::kInt64:
      return as.operator()<int64_t, 32>([](uint64_t c) { return static_cast<int64_t>(c % 1000); });
    case DType::kUInt16:
      return as.operator()<uint16_t, 32>(
          [](uint64_t c) { return static_cast<uint16_t>(c % 1000); });
    case DType::kUInt32:
      return as.operator()<uint32_t, 32>(
          [](uint64_t c) { return static_cast<uint32_t>(c % 1000); });
    case DType::kUInt64:
      return as.operator()<uint64_t, 32>([](uint64_t c) { return c % 1000; });
  }
  GPUFEED_ASSERT(false, "unknown dtype");
}

class SyntheticSource final : public Source {
 public:
  SyntheticSource(Schema schema, int64_t samples, uint64_t seed, SyntheticLengths lengths)
      : schema_(std::move(schema)), samples_(samples), seed_(seed), lengths_(lengths) {
    for (size_t f = 0; f < schema_.fields.size(); ++f) {
      const FieldSpec& spec = schema_.fields[f];
      field_keys_.push_back(FieldKey(seed_, static_cast<int>(f)));
      elements_.push_back(spec.variable() ? spec.ElementsPerItem() : spec.ElementsPerSample());
    }
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  std::string Describe() const override {
    return fmt::format("synthetic ({} fields, {} samples, seed {}{})", schema_.fields.size(),
                       samples_, seed_, LengthsText());
  }
  std::string Identity() const override {
    return fmt::format("synthetic:{}:{}:{}{}", schema_.ToString(), samples_, seed_, LengthsText());
  }

  // Any order costs the same: nothing is read, so no sorting either.
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState*) const override {
    CheckReadRequest(*this, indices, out);
    for (size_t f = 0; f < schema_.fields.size(); ++f) {
      if (schema_.fields[f].variable()) continue;  // ReadItems serves it
      FillField(schema_.fields[f].dtype, indices, field_keys_[f], elements_[f], out.fields[f]);
    }
  }

  void ReadLengths(int field, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState*) const override {
    Variable(field);
    GPUFEED_ASSERT(lengths.size() == indices.size(), "ReadLengths: one length per index");
    for (size_t i = 0; i < indices.size(); ++i) {
      lengths[i] = SyntheticLength(lengths_, seed_, field, CheckSampleIndex(*this, indices[i]));
    }
  }

  void ReadItems(int field, int64_t index, int64_t first, std::span<std::byte> out,
                 SourceWorkerState*) const override {
    const FieldSpec& spec = Variable(field);
    const int64_t length = SyntheticLength(lengths_, seed_, field, CheckSampleIndex(*this, index));
    const int64_t count = CheckItemsRequest(*this, field, index, first, out, length);
    const auto f = static_cast<size_t>(field);
    FillItemRange(spec.dtype, RowKey(field_keys_[f], index), first * elements_[f],
                  count * elements_[f], out.data());
  }

 private:
  std::string LengthsText() const {
    return lengths_.kind == SyntheticLengths::Kind::kNone ? std::string()
                                                          : ", lengths " + lengths_.ToString();
  }
  const FieldSpec& Variable(int field) const {
    if (field < 0 || static_cast<size_t>(field) >= schema_.fields.size() ||
        !schema_.fields[static_cast<size_t>(field)].variable()) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: field number {} is not a variable-length field", Describe(), field));
    }
    return schema_.fields[static_cast<size_t>(field)];
  }

  const Schema schema_;
  const int64_t samples_;
  const uint64_t seed_;
  const SyntheticLengths lengths_;
  std::vector<uint64_t> field_keys_;
  std::vector<int64_t> elements_;  // per sample; per item for a variable-length field
};

// Refuses the lengths a schema cannot use: none for a variable-length field, some for a schema
// without one, or a longest sample whose bytes pass 63 bits.
void CheckLengths(const Schema& schema, const SyntheticLengths& lengths) {
  const bool none = lengths.kind == SyntheticLengths::Kind::kNone;
  if (!schema.HasVariable()) {
    if (none) return;
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("synthetic source: lengths {} given, but no field of {} is "
                            "variable-length ('*')",
                            lengths.ToString(), schema.ToString()));
  }
  for (const FieldSpec& field : schema.fields) {
    if (!field.variable()) continue;
    if (none) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("synthetic source: field {} is variable-length; give its lengths "
                              "(\"uniform:MIN:MAX\" or \"lognormal:MEDIAN:SIGMA[:MAX]\")",
                              field.ToString()));
    }
    const size_t item = field.ItemBytes();
    if (item > 0 && static_cast<uint64_t>(lengths.max) >
                        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / item) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("synthetic source: {} items of field {} pass 63 bits of bytes",
                              lengths.max, field.ToString()));
    }
  }
}

}  // namespace

std::shared_ptr<Source> OpenSynthetic(Schema schema, int64_t samples, uint64_t seed,
                                      SyntheticLengths lengths) {
  if (samples < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("synthetic source: {} samples; expected 0 or more", samples));
  }
  if (schema.fields.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "synthetic source: the schema has no fields");
  }
  std::set<std::string> names;
  for (const auto& field : schema.fields) {
    if (!names.insert(field.name).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("synthetic source: field '{}' appears twice", field.name));
    }
    for (size_t i = field.variable() ? 1 : 0; i < field.shape.size(); ++i) {
      if (field.shape[i] < 0) {
        throw Error(
            ErrorCode::kInvalidArgument,
            fmt::format("synthetic source: field {} has a negative dimension", field.ToString()));
      }
    }
  }
  CheckLengths(schema, lengths);
  return std::make_shared<SyntheticSource>(std::move(schema), samples, seed, lengths);
}

double SyntheticValue(uint64_t seed, int field, int64_t sample, int64_t element, DType dtype) {
  const int bits = ChunkBits(dtype);
  const int64_t per_word = 64 / bits;
  const uint64_t h = WordHash(RowKey(FieldKey(seed, field), sample), element / per_word);
  const uint64_t chunk = h >> ((element % per_word) * bits);
  return ValueOf(dtype, bits == 64 ? chunk : chunk & ((uint64_t{1} << bits) - 1));
}

}  // namespace gpufeed
