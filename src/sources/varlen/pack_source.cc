// PackSequences: a variable-length field's samples end to end in rows of one length.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/thread_annotations.h"
#include "gpufeed/error.h"
#include "sources/varlen/pack_layout.h"
#include "sources/varlen/varlen_common.h"

namespace gpufeed {
namespace {

// Writes one packed row: values, positions, document numbers, piece by piece.
class RowWriter {
 public:
  RowWriter(std::byte* values, int32_t* positions, int32_t* documents, size_t item_bytes)
      : values_(values), positions_(positions), documents_(documents), item_bytes_(item_bytes) {}

  std::byte* next_items() const { return values_ + static_cast<size_t>(column_) * item_bytes_; }
  // Marks `count` items written at next_items() as a piece of document `document`, the piece
  // starting at position 0.
  // Without ids (null positions), only the column moves.
  void Advance(int64_t count, int32_t document) {
    for (int64_t j = 0; positions_ != nullptr && j < count; ++j) {
      positions_[column_ + j] = static_cast<int32_t>(piece_column_ + j);
      documents_[column_ + j] = document;
    }
    column_ += count;
    piece_column_ += count;
  }
  void EndPiece() { piece_column_ = 0; }
  int64_t column() const { return column_; }

 private:
  std::byte* values_;
  int32_t* positions_;
  int32_t* documents_;
  size_t item_bytes_;
  int64_t column_ = 0;
  int64_t piece_column_ = 0;
};

class PackedSource final : public VarlenRowsSource {
 public:
  PackedSource(std::shared_ptr<Source> base, PackOptions options, int field,
               std::vector<int64_t> lengths)
      : VarlenRowsSource(std::move(base), field, std::move(lengths)),
        options_(std::move(options)) {
    const FieldSpec& spec = spec_;
    elements_per_item_ = spec.ElementsPerItem();
    const std::string what = fmt::format("PackSequences: field '{}'", spec.name);
    pad_ = EncodeElement(options_.pad_value, spec.dtype, what + ": pad_value");
    if (options_.eos) eos_ = EncodeElement(*options_.eos, spec.dtype, what + ": eos");
    FieldSpec values = spec;
    values.shape.front() = options_.length;
    (void)values.SampleBytes();
    const std::vector<int64_t> row = {options_.length};
    schema_.fields = {values};
    if (options_.ids) {
      schema_.fields.push_back(
          {.name = spec.name + "_position_ids", .dtype = DType::kInt32, .shape = row});
      schema_.fields.push_back(
          {.name = spec.name + "_document_ids", .dtype = DType::kInt32, .shape = row});
    }
    schema_.fields.push_back({.name = spec.name + "_lengths", .dtype = DType::kInt64, .shape = {}});
    int64_t items = 0;
    for (int64_t length : lengths_) items += length;
    const bool eos = options_.eos.has_value();
    if (options_.split) {
      fixed_stream_ = MakeStream(lengths_, eos, false, 0);
      const int64_t total = fixed_stream_.prefix.back();
      rows_ = (total + options_.length - 1) / options_.length;
      stats_.items = total;
      stats_.pad_items = rows_ * options_.length - total;
    } else {
      bins_ = MakeBins(lengths_, eos, options_.length, options_.window);
      rows_ = static_cast<int64_t>(bins_.row_begin.size()) - 1;
      int64_t kept = 0;
      for (const PackPiece& p : bins_.pieces) kept += p.items + (p.eos ? 1 : 0);
      stats_.items = kept;
      stats_.truncated_items = bins_.truncated_items;
      stats_.pad_items = rows_ * options_.length - kept;
    }
    stats_.rows = rows_;
    (void)items;
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return rows_; }
  std::string Describe() const override {
    return fmt::format("{} packed in rows of {}{}", base_->Describe(), options_.length,
                       options_.split ? "" : " (whole samples)");
  }
  std::string Identity() const override {
    return fmt::format("{}|pack:{}:{}:{}:{}:{}:{}:{}", base_->Identity(), field_,
                       options_.length, options_.split, options_.eos.value_or(-0.5),
                       options_.pad_value, options_.window, options_.ids);
  }
  // A shuffled stream holds other rows each epoch: no copy of one epoch's rows may serve the next.
  bool rows_repeat() const override { return !(options_.split && options_.shuffle); }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    ReadSeeded(indices, out, state, 0);
  }

  void ReadSeeded(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
                  uint64_t seed) const override {
    CheckReadRequest(*this, indices, out);
    std::shared_ptr<const PackStream> shuffled;
    const PackStream* stream = &fixed_stream_;
    if (options_.split && options_.shuffle) {
      shuffled = StreamFor(seed);
      stream = shuffled.get();
    }
    const size_t length = static_cast<size_t>(options_.length);
    std::vector<PackPiece> pieces;
    std::vector<ItemsRequest> requests;
    for (size_t i = 0; i < indices.size(); ++i) {
      if (options_.split) {
        StreamRow(*stream, lengths_, options_.eos.has_value(), options_.length, indices[i], pieces);
      } else {
        const auto b = static_cast<size_t>(indices[i]);
        pieces.assign(bins_.pieces.begin() + bins_.row_begin[b],
                      bins_.pieces.begin() + bins_.row_begin[b + 1]);
      }
      const size_t ids = options_.ids ? 2 : 0;
      WriteRow(pieces, out.fields[0] + i * length * item_bytes_,
               ids ? reinterpret_cast<int32_t*>(out.fields[1]) + i * length : nullptr,
               ids ? reinterpret_cast<int32_t*>(out.fields[2]) + i * length : nullptr,
               reinterpret_cast<int64_t*>(out.fields[1 + ids]) + i, requests);
    }
    base_->ReadItemsMany(field_, requests, state);
  }

 private:
  // Writes one row but its items, which it adds to `requests` (the batch's items are read in
  // one call, ReadItemsMany).
  void WriteRow(std::span<const PackPiece> pieces, std::byte* values, int32_t* positions,
                int32_t* documents, int64_t* real, std::vector<ItemsRequest>& requests) const {
    RowWriter row(values, positions, documents, item_bytes_);
    int32_t document = 0;
    for (const PackPiece& p : pieces) {
      const size_t bytes = static_cast<size_t>(p.items) * item_bytes_;
      if (bytes > 0) requests.push_back({p.sample, p.first, {row.next_items(), bytes}});
      row.Advance(p.items, document);
      if (p.eos) {
        FillElements(row.next_items(), elements_per_item_, *eos_);
        row.Advance(1, document);
      }
      row.EndPiece();
      ++document;
    }
    *real = row.column();
    const int64_t rest = options_.length - row.column();
    FillElements(row.next_items(), rest * elements_per_item_, pad_);
    if (positions != nullptr) {
      std::fill_n(positions + row.column(), rest, 0);
      std::fill_n(documents + row.column(), rest, -1);
    }
  }

  // The epoch's stream for `seed`, made once: the two most recent are kept, since a loader's
  // workers build the end of one epoch and the start of the next at once.
  std::shared_ptr<const PackStream> StreamFor(uint64_t seed) const {
    MutexLock lock(&mu_);
    for (const auto& [s, stream] : streams_) {
      if (s == seed) return stream;
    }
    auto made = std::make_shared<const PackStream>(
        MakeStream(lengths_, options_.eos.has_value(), true, seed));
    if (streams_.size() == 2) streams_.erase(streams_.begin());
    streams_.emplace_back(seed, made);
    return made;
  }

  const PackOptions options_;
  int64_t elements_per_item_ = 1;
  ElementBytes pad_;
  std::optional<ElementBytes> eos_;
  Schema schema_;
  int64_t rows_ = 0;
  PackStream fixed_stream_;  // split: the source's order
  PackBins bins_;            // !split
  mutable Mutex mu_;
  mutable std::vector<std::pair<uint64_t, std::shared_ptr<const PackStream>>> streams_
      GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<Source> PackSequences(std::shared_ptr<Source> source, PackOptions options) {
  if (source == nullptr) throw Error(ErrorCode::kInvalidArgument, "PackSequences: source is null");
  const int field = ChooseVariableField(*source, options.field, "PackSequences");
  if (options.length < 1 || options.window < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PackSequences: length ({}) and window ({}) must be >= 1",
                            options.length, options.window));
  }
  options.field = source->schema().fields[static_cast<size_t>(field)].name;
  std::vector<int64_t> lengths = AllLengths(*source, field);
  return std::make_shared<PackedSource>(std::move(source), std::move(options), field,
                                        std::move(lengths));
}

}  // namespace gpufeed
