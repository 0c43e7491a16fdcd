// What the padding and packing adaptors share: the field they batch, every sample's length,
// a value written as a field's dtype, and the base class that reports their fill.
// Thread-safety: pure functions; VarlenRowsSource's stats are fixed at construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/source.h"
#include "gpufeed/varlen.h"

namespace gpufeed {

// The variable-length field `name` of `source` (empty: its only one), as its index. Throws
// Error(kInvalidArgument), naming `who` and the fields, for an unknown or fixed-size field,
// no variable field, or (empty name) several, and for any variable field beside the one
// chosen (one loader batches one variable-length field).
int ChooseVariableField(const Source& source, const std::string& name, const char* who);

// Every sample's item count of field `field`, read in slices; each checked to be >= 0 and
// their sum to fit 63 bits of the field's bytes (Error(kCorruptData) naming the source,
// field and sample).
std::vector<int64_t> AllLengths(const Source& source, int field);

// `value` as one element of `dtype`: its bytes, little-endian as the host stores them.
// Throws Error(kInvalidArgument) naming `what` for a value the dtype cannot hold exactly.
struct ElementBytes {
  std::array<std::byte, 8> bytes{};
  size_t size = 0;
};
ElementBytes EncodeElement(double value, DType dtype, const std::string& what);

// Writes `count` elements of `value` at `dst`.
void FillElements(std::byte* dst, int64_t count, const ElementBytes& value);

// `stats` with the varlen figures of `varlen` (SourceStats::varlen_*).
inline SourceStats WithVarlen(SourceStats stats, const VarlenStats& varlen) {
  stats.varlen_items = varlen.items;
  stats.varlen_pad_items = varlen.pad_items;
  stats.varlen_truncated_items = varlen.truncated_items;
  return stats;
}

// A source of fixed-size rows made from a variable-length field; it knows its fill.
class VarlenRowsSource : public Source {
 public:
  virtual VarlenStats varlen_stats() const = 0;
};

}  // namespace gpufeed
