// The lengths of synthetic variable-length samples (SyntheticLengths, gpufeed/sources.h): a
// distribution spelled "uniform:MIN:MAX" or "lognormal:MEDIAN:SIGMA[:MAX]", drawn per
// (seed, field, sample) from splitmix64 hashes, so a length costs a few arithmetic operations
// and no memory.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/splitmix.h"
#include "core/text.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

// Keeps the lengths' hashes apart from the values' (synthetic_source.cc's FieldKey).
constexpr uint64_t kLengthSalt = 0x6c656e6774687321ull;
constexpr uint64_t kSampleStep = 0xd1b54a32d192ed03ull;

// The largest |z| the normal draw below can make: u1 is at least 2^-53, so
// sqrt(-2 ln u1) <= sqrt(106 ln 2) = 8.5718...
constexpr double kMaxNormal = 8.5719;

[[noreturn]] void Refuse(std::string_view spec, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("synthetic lengths '{}': {}; expected \"uniform:MIN:MAX\" or "
                          "\"lognormal:MEDIAN:SIGMA[:MAX]\"",
                          spec, why));
}

uint64_t LengthHash(uint64_t seed, int field, int64_t sample, uint64_t draw) {
  const uint64_t key =
      SplitMixFinalize((seed ^ kLengthSalt) + (static_cast<uint64_t>(field) + 1) * kSplitMixGamma);
  return SplitMixFinalize(key + static_cast<uint64_t>(sample) * kSampleStep +
                          draw * kSplitMixGamma);
}

// A uniform draw in (0, 1] from the hash's top 53 bits.
double Unit(uint64_t h) { return (static_cast<double>(h >> 11) + 1) * 0x1p-53; }

}  // namespace

std::string SyntheticLengths::ToString() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kUniform:
      return fmt::format("uniform:{}:{}", a, b);
    case Kind::kLogNormal:
      return fmt::format("lognormal:{}:{}:{}", a, b, max);
  }
  return "none";
}

SyntheticLengths ParseSyntheticLengths(std::string_view spec) {
  const std::vector<std::string_view> parts = Split(Trim(spec), ':');
  SyntheticLengths out;
  std::vector<double> numbers;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto n = ParseNumber<double>(Trim(parts[i]));
    if (!n || !std::isfinite(*n)) Refuse(spec, fmt::format("'{}' is not a number", parts[i]));
    numbers.push_back(*n);
  }
  const auto limit = static_cast<double>(kMaxSyntheticLength);
  if (parts[0] == "uniform" && numbers.size() == 2) {
    out.kind = SyntheticLengths::Kind::kUniform;
    out.a = numbers[0];
    out.b = numbers[1];
    if (out.a != std::floor(out.a) || out.b != std::floor(out.b) || out.a < 0 || out.b < out.a ||
        out.b > limit) {
      Refuse(spec, fmt::format("MIN and MAX must be whole numbers with 0 <= MIN <= MAX <= {}",
                               kMaxSyntheticLength));
    }
    out.max = static_cast<int64_t>(out.b);
    return out;
  }
  if (parts[0] == "lognormal" && (numbers.size() == 2 || numbers.size() == 3)) {
    out.kind = SyntheticLengths::Kind::kLogNormal;
    out.a = numbers[0];
    out.b = numbers[1];
    if (out.a <= 0 || out.b < 0) Refuse(spec, "MEDIAN must be above 0 and SIGMA not below 0");
    if (numbers.size() == 3) {
      if (numbers[2] != std::floor(numbers[2]) || numbers[2] < 0 || numbers[2] > limit) {
        Refuse(spec, fmt::format("MAX must be a whole number in [0, {}]", kMaxSyntheticLength));
      }
      out.max = static_cast<int64_t>(numbers[2]);
      return out;
    }
    const double largest = std::round(out.a * std::exp(out.b * kMaxNormal));
    if (!(largest <= limit)) {
      Refuse(spec, fmt::format("its lengths could reach {:.3g}, past {} items; give a MAX "
                               "(lognormal:{}:{}:MAX)",
                               largest, kMaxSyntheticLength, out.a, out.b));
    }
    out.max = static_cast<int64_t>(largest);
    return out;
  }
  Refuse(spec, "unknown distribution or wrong number of parameters");
}

int64_t SyntheticLength(const SyntheticLengths& lengths, uint64_t seed, int field, int64_t sample) {
  switch (lengths.kind) {
    case SyntheticLengths::Kind::kNone:
      break;
    case SyntheticLengths::Kind::kUniform: {
      const auto low = static_cast<uint64_t>(lengths.a);
      const uint64_t span = static_cast<uint64_t>(lengths.b) - low + 1;
      const auto h = static_cast<unsigned __int128>(LengthHash(seed, field, sample, 0));
      return static_cast<int64_t>(low + static_cast<uint64_t>((h * span) >> 64));
    }
    case SyntheticLengths::Kind::kLogNormal: {
      // Box-Muller from two hashes: z is a standard normal draw, |z| < kMaxNormal.
      const double u1 = Unit(LengthHash(seed, field, sample, 0));
      const double u2 = Unit(LengthHash(seed, field, sample, 1));
      const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
      const double length = std::round(lengths.a * std::exp(lengths.b * z));
      return std::min(lengths.max, static_cast<int64_t>(std::min(length, 0x1p62)));
    }
  }
  throw Error(ErrorCode::kInvalidArgument, "synthetic source: no length distribution given");
}

}  // namespace gpufeed
