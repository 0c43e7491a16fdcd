// PadSequences: one row per sample, the variable-length field padded (or cut) to one length.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/varlen/varlen_common.h"

namespace gpufeed {
namespace {

class PaddedSource final : public VarlenRowsSource {
 public:
  PaddedSource(std::shared_ptr<Source> base, PadOptions options, int field,
               std::vector<int64_t> lengths)
      : VarlenRowsSource(std::move(base), field, std::move(lengths)),
        options_(std::move(options)) {
    const FieldSpec& spec = spec_;
    pad_ = EncodeElement(options_.pad_value, spec.dtype,
                         fmt::format("PadSequences: pad_value for field '{}'", spec.name));
    for (size_t f = 0; f < base_->schema().fields.size(); ++f) {
      const FieldSpec& in = base_->schema().fields[f];
      if (static_cast<int>(f) != field_) {
        schema_.fields.push_back(in);
        from_.push_back(static_cast<int>(f));
        continue;
      }
      FieldSpec padded = in;
      padded.shape.front() = options_.max_length;
      (void)padded.SampleBytes();  // checked: max_length items of this field
      schema_.fields.push_back(padded);
      from_.push_back(static_cast<int>(f));
      schema_.fields.push_back({.name = in.name + "_lengths", .dtype = DType::kInt64, .shape = {}});
      from_.push_back(-1);
    }
    stats_.rows = base_->size();
    for (int64_t length : lengths_) {
      const int64_t kept = std::min(length, options_.max_length);
      stats_.items += kept;
      stats_.truncated_items += length - kept;
      stats_.pad_items += options_.max_length - kept;
    }
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return base_->size(); }
  std::string Describe() const override {
    return fmt::format("{} padded to {}", base_->Describe(), options_.max_length);
  }
  std::string Identity() const override {
    return fmt::format("{}|pad:{}:{}:{}:{}", base_->Identity(), field_, options_.max_length,
                       options_.pad_value, options_.truncate_left ? "left" : "right");
  }
  int64_t PreferredBlock() const override { return base_->PreferredBlock(); }
  SourceChunking chunking() const override { return base_->chunking(); }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    CheckReadRequest(*this, indices, out);
    BatchView inner{.fields = std::vector<std::byte*>(base_->schema().fields.size()),
                    .rows = out.rows};
    std::byte* values = nullptr;
    int64_t* lengths = nullptr;
    for (size_t o = 0; o < from_.size(); ++o) {
      if (from_[o] < 0) {
        lengths = reinterpret_cast<int64_t*>(out.fields[o]);
      } else if (from_[o] == field_) {
        values = out.fields[o];
      } else {
        inner.fields[static_cast<size_t>(from_[o])] = out.fields[o];
      }
    }
    if (base_->schema().fields.size() > 1) base_->Read(indices, inner, state);
    const int64_t max_length = options_.max_length;
    const size_t row_bytes = static_cast<size_t>(max_length) * item_bytes_;
    const int64_t elements_per_item =
        static_cast<int64_t>(item_bytes_ / std::max<size_t>(pad_.size, 1));
    std::vector<ItemsRequest> requests;
    requests.reserve(indices.size());
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t length = lengths_[static_cast<size_t>(indices[i])];
      const int64_t kept = std::min(length, max_length);
      const int64_t first = options_.truncate_left ? length - kept : 0;
      std::byte* row = values + i * row_bytes;
      requests.push_back({indices[i], first, {row, static_cast<size_t>(kept) * item_bytes_}});
      FillElements(row + static_cast<size_t>(kept) * item_bytes_,
                   (max_length - kept) * elements_per_item, pad_);
      lengths[i] = kept;
    }
    base_->ReadItemsMany(field_, requests, state);
  }

 private:
  const PadOptions options_;
  ElementBytes pad_;
  Schema schema_;
  std::vector<int> from_;  // per output field: the base field, or -1 for the lengths
};

}  // namespace

std::shared_ptr<Source> PadSequences(std::shared_ptr<Source> source, PadOptions options) {
  if (source == nullptr) throw Error(ErrorCode::kInvalidArgument, "PadSequences: source is null");
  const int field = ChooseVariableField(*source, options.field, "PadSequences");
  const std::string& name = source->schema().fields[static_cast<size_t>(field)].name;
  if (source->schema().IndexOf(name + "_lengths") >= 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("PadSequences: {} already has a field '{}_lengths'", source->Describe(), name));
  }
  if (options.pad_to_multiple_of < 1 || options.max_length < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PadSequences: max_length ({}) must be >= 0 (0: the longest sample) "
                            "and pad_to_multiple_of ({}) >= 1",
                            options.max_length, options.pad_to_multiple_of));
  }
  std::vector<int64_t> lengths = AllLengths(*source, field);
  if (options.max_length == 0) {
    for (int64_t length : lengths) options.max_length = std::max(options.max_length, length);
    options.max_length = std::max<int64_t>(options.max_length, 1);
  }
  const int64_t m = options.pad_to_multiple_of;
  const auto rounded =
      CheckedAdd(static_cast<uint64_t>(options.max_length), static_cast<uint64_t>(m - 1));
  if (!rounded || *rounded > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PadSequences: max_length {} rounded up to a multiple of {} "
                            "overflows",
                            options.max_length, m));
  }
  options.max_length = static_cast<int64_t>(*rounded / static_cast<uint64_t>(m)) * m;
  options.field = name;
  return std::make_shared<PaddedSource>(std::move(source), std::move(options), field,
                                        std::move(lengths));
}

std::optional<VarlenStats> VarlenStatsOf(const Source& source) {
  if (const auto* rows = dynamic_cast<const VarlenRowsSource*>(&source)) {
    return rows->varlen_stats();
  }
  return std::nullopt;
}

}  // namespace gpufeed
