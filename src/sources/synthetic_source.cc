// The synthetic source: deterministic data of any schema, computed on the fly. Benchmarks use
// it to measure the loader without I/O, so Read writes values straight into the batch with
// one hash per element and no per-element dispatch.
//
// Every element is a function of (seed, field, sample, element) through splitmix64's mixer.
// Floating values are drawn on a grid that the dtype represents exactly (k / 2^(p-1) for a
// p-bit significand), so what SyntheticValue returns is bit-for-bit what Read stores, for
// float16 and bfloat16 too: float16 values are multiples of 2^-10 and bfloat16 values
// multiples of 2^-7 in [-1, 1).
#include <array>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kSampleStep = 0xd1b54a32d192ed03ull;

inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t FieldKey(uint64_t seed, int field) {
  return Mix(seed ^ (static_cast<uint64_t>(field) + 1) * kGolden);
}
inline uint64_t RowKey(uint64_t field_key, int64_t sample) {
  return Mix(field_key + static_cast<uint64_t>(sample) * kSampleStep);
}
inline uint64_t ElementHash(uint64_t row_key, int64_t element) {
  return Mix(row_key + (static_cast<uint64_t>(element) + 1) * kGolden);
}

// The grid index behind a float of `bits` significant bits: [-2^(bits-1), 2^(bits-1)).
template <int kBits>
inline int64_t Grid(uint64_t h) {
  return static_cast<int64_t>(h >> (64 - kBits)) - (int64_t{1} << (kBits - 1));
}
template <int kBits>
inline double GridValue(uint64_t h) {
  return static_cast<double>(Grid<kBits>(h)) / static_cast<double>(int64_t{1} << (kBits - 1));
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

// The value stored for hash `h`, as a double. Integers stay in small ranges so sums and
// embeddings built on them stay sane; int64 is label-like (class ids 0..999).
double ValueOf(DType dtype, uint64_t h) {
  switch (dtype) {
    case DType::kBool:
      return static_cast<double>(h >> 63);
    case DType::kInt8:
      return static_cast<double>(static_cast<int64_t>(h >> 56) - 128);
    case DType::kUInt8:
      return static_cast<double>(h >> 56);
    case DType::kInt16:
    case DType::kInt32:
      return static_cast<double>(static_cast<int64_t>((h >> 32) % 2000) - 1000);
    case DType::kInt64:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return static_cast<double>((h >> 32) % 1000);
    case DType::kFloat16:
      return GridValue<11>(h);
    case DType::kBFloat16:
      return GridValue<8>(h);
    case DType::kFloat32:
      return GridValue<24>(h);
    case DType::kFloat64:
      return GridValue<53>(h);
  }
  GPUFEED_ASSERT(false, "unknown dtype");
}

// Fills `rows` samples of one field; `store(h)` turns a hash into the element, inlined.
template <typename T, typename Store>
void FillField(std::span<const int64_t> indices, uint64_t field_key, int64_t elements,
               std::byte* out, Store store) {
  T* dst = reinterpret_cast<T*>(out);
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint64_t row_key = RowKey(field_key, indices[i]);
    T* row = dst + static_cast<int64_t>(i) * elements;
    for (int64_t e = 0; e < elements; ++e) row[e] = store(ElementHash(row_key, e));
  }
}

void FillField(DType dtype, std::span<const int64_t> indices, uint64_t key, int64_t elements,
               std::byte* out) {
  switch (dtype) {
    case DType::kBool:
      return FillField<uint8_t>(indices, key, elements, out,
                                [](uint64_t h) { return static_cast<uint8_t>(h >> 63); });
    case DType::kInt8:
      return FillField<int8_t>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<int8_t>(static_cast<int64_t>(h >> 56) - 128);
      });
    case DType::kUInt8:
      return FillField<uint8_t>(indices, key, elements, out,
                                [](uint64_t h) { return static_cast<uint8_t>(h >> 56); });
    case DType::kInt16:
      return FillField<int16_t>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<int16_t>(static_cast<int64_t>((h >> 32) % 2000) - 1000);
      });
    case DType::kInt32:
      return FillField<int32_t>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<int32_t>(static_cast<int64_t>((h >> 32) % 2000) - 1000);
      });
    case DType::kInt64:
      return FillField<int64_t>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<int64_t>((h >> 32) % 1000);
      });
    case DType::kUInt16:
      return FillField<uint16_t>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<uint16_t>((h >> 32) % 1000);
      });
    case DType::kUInt32:
      return FillField<uint32_t>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<uint32_t>((h >> 32) % 1000);
      });
    case DType::kUInt64:
      return FillField<uint64_t>(indices, key, elements, out,
                                 [](uint64_t h) { return (h >> 32) % 1000; });
    case DType::kFloat16: {
      const auto& table = GridTable<11, FloatToHalf>();
      return FillField<uint16_t>(indices, key, elements, out,
                                 [&table](uint64_t h) { return table[h >> 53]; });
    }
    case DType::kBFloat16: {
      const auto& table = GridTable<8, FloatToBFloat16>();
      return FillField<uint16_t>(indices, key, elements, out,
                                 [&table](uint64_t h) { return table[h >> 56]; });
    }
    case DType::kFloat32:
      return FillField<float>(indices, key, elements, out, [](uint64_t h) {
        return static_cast<float>(Grid<24>(h)) * (1.0f / (1 << 23));
      });
    case DType::kFloat64:
      return FillField<double>(indices, key, elements, out,
                               [](uint64_t h) { return GridValue<53>(h); });
  }
  GPUFEED_ASSERT(false, "unknown dtype");
}

class SyntheticSource final : public Source {
 public:
  SyntheticSource(Schema schema, int64_t samples, uint64_t seed)
      : schema_(std::move(schema)), samples_(samples), seed_(seed) {
    for (size_t f = 0; f < schema_.fields.size(); ++f) {
      field_keys_.push_back(FieldKey(seed_, static_cast<int>(f)));
      elements_.push_back(schema_.fields[f].ElementsPerSample());
    }
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  std::string Describe() const override {
    return fmt::format("synthetic ({} fields, {} samples, seed {})", schema_.fields.size(),
                       samples_, seed_);
  }
  std::string Identity() const override {
    return fmt::format("synthetic:{}:{}:{}", schema_.ToString(), samples_, seed_);
  }

  // Any order costs the same: nothing is read, so no sorting either.
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState*) const override {
    GPUFEED_ASSERT(out.rows == static_cast<int64_t>(indices.size()),
                   "BatchView rows differ from the number of indices");
    GPUFEED_ASSERT(out.fields.size() == schema_.fields.size(),
                   "BatchView has the wrong field count");
    for (int64_t index : indices) {
      if (index < 0 || index >= samples_) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: sample index {} is out of range [0, {})", Describe(), index,
                                samples_));
      }
    }
    for (size_t f = 0; f < schema_.fields.size(); ++f) {
      FillField(schema_.fields[f].dtype, indices, field_keys_[f], elements_[f], out.fields[f]);
    }
  }

 private:
  const Schema schema_;
  const int64_t samples_;
  const uint64_t seed_;
  std::vector<uint64_t> field_keys_;
  std::vector<int64_t> elements_;
};

}  // namespace

std::shared_ptr<Source> OpenSynthetic(Schema schema, int64_t samples, uint64_t seed) {
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
    for (int64_t d : field.shape) {
      if (d < 0) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("synthetic source: field {} has a negative dimension",
                                field.ToString()));
      }
    }
  }
  return std::make_shared<SyntheticSource>(std::move(schema), samples, seed);
}

double SyntheticValue(uint64_t seed, int field, int64_t sample, int64_t element, DType dtype) {
  return ValueOf(dtype, ElementHash(RowKey(FieldKey(seed, field), sample), element));
}

}  // namespace gpufeed
