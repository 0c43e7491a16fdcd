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
// What both adaptors hold: the source, its variable-length field, every sample's length, and
// the forwarding of what does not change with the rows (worker state, sharing, a copy's worth,
// the source's own counters with the rows' fill).
class VarlenRowsSource : public Source {
 public:
  VarlenRowsSource(std::shared_ptr<Source> base, int field, std::vector<int64_t> lengths)
      : base_(std::move(base)),
        field_(field),
        lengths_(std::move(lengths)),
        spec_(base_->schema().fields[static_cast<size_t>(field_)]),
        item_bytes_(spec_.ItemBytes()) {}

  VarlenStats varlen_stats() const { return stats_; }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    return base_->NewWorkerState();
  }
  bool shareable_across_processes() const override { return base_->shareable_across_processes(); }
  // A copy would hold the padding (and ids) besides the items, and read no faster.
  bool copy_speeds_reads() const override { return false; }
  SourceStats Stats() const override { return WithVarlen(base_->Stats(), stats_); }

 protected:
  const std::shared_ptr<Source> base_;
  const int field_;
  const std::vector<int64_t> lengths_;
  const FieldSpec spec_;  // the variable-length field
  const size_t item_bytes_;
  VarlenStats stats_;  // set by the constructor of the adaptor
};

}  // namespace gpufeed
