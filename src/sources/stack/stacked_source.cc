// StackFields: the inner source reads its fields into per-worker scratch, and the stacked
// fields are interleaved (converted first where a dtype asks) into the batch buffer. A field
// that is one column of its own dtype is read straight into the batch.
#include <fmt/format.h>

#include <span>

#include "gpufeed/error.h"
#include "gpufeed/stack.h"
#include "sources/stack/plan.h"

namespace gpufeed {
namespace {

struct StackedWorkerState final : SourceWorkerState {
  std::unique_ptr<SourceWorkerState> inner;
  std::vector<std::vector<std::byte>> columns;    // per inner field: its rows as read
  std::vector<std::vector<std::byte>> converted;  // per inner field: its rows converted
};

class StackedSource final : public Source {
 public:
  StackedSource(std::shared_ptr<Source> inner, StackPlan plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {
    for (const auto& f : plan_.fields) schema_.fields.push_back(f.spec);
    direct_.assign(inner_->schema().fields.size(), -1);
    for (size_t o = 0; o < plan_.fields.size(); ++o) {
      const auto& f = plan_.fields[o];
      const FieldSpec& column = inner_->schema().fields[f.columns.front()];
      if (f.columns.size() == 1 && f.spec.shape == column.shape && f.spec.dtype == column.dtype &&
          direct_[f.columns.front()] < 0) {
        direct_[f.columns.front()] = static_cast<int>(o);
      }
    }
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return inner_->size(); }
  std::string Describe() const override {
    return fmt::format("{} as {}", inner_->Describe(), schema_.ToString());
  }
  std::string Identity() const override {
    return fmt::format("{}|stacked:{}", inner_->Identity(), schema_.ToString());
  }
  int64_t PreferredBlock() const override { return inner_->PreferredBlock(); }
  SourceChunking chunking() const override { return inner_->chunking(); }
  CacheTier cache_tier() const override { return inner_->cache_tier(); }
  bool shareable_across_processes() const override { return inner_->shareable_across_processes(); }
  bool rows_repeat() const override { return inner_->rows_repeat(); }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    auto state = std::make_unique<StackedWorkerState>();
    state->inner = inner_->NewWorkerState();
    state->columns.resize(inner_->schema().fields.size());
    state->converted.resize(inner_->schema().fields.size());
    return state;
  }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    Stack(indices, out, state, [&](const BatchView& view, SourceWorkerState* inner) {
      inner_->Read(indices, view, inner);
    });
  }
  void ReadSeeded(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
                  uint64_t seed) const override {
    Stack(indices, out, state, [&](const BatchView& view, SourceWorkerState* inner) {
      inner_->ReadSeeded(indices, view, inner, seed);
    });
  }

 private:
  template <typename ReadInner>
  void Stack(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
             ReadInner&& read_inner) const {
    CheckReadRequest(*this, indices, out);
    std::unique_ptr<SourceWorkerState> own;
    auto* s = dynamic_cast<StackedWorkerState*>(state);
    if (s == nullptr) {  // a caller without worker state (tests, one-off reads)
      own = NewWorkerState();
      s = static_cast<StackedWorkerState*>(own.get());
    }
    const auto& columns = inner_->schema().fields;
    BatchView view{.fields = std::vector<std::byte*>(columns.size()), .rows = out.rows};
    for (size_t c = 0; c < columns.size(); ++c) {
      if (direct_[c] >= 0) {
        view.fields[c] = out.fields[direct_[c]];
        continue;
      }
      s->columns[c].resize(static_cast<size_t>(out.rows) * columns[c].SampleBytes());
      view.fields[c] = s->columns[c].data();
    }
    read_inner(view, s->inner.get());
    for (size_t o = 0; o < plan_.fields.size(); ++o) {
      const auto& f = plan_.fields[o];
      if (f.columns.size() == 1 && direct_[f.columns.front()] == static_cast<int>(o)) continue;
      std::vector<const std::byte*> parts;
      for (int c : f.columns) {
        parts.push_back(Converted(c, view.fields[c], f.spec.dtype, indices, *s));
      }
      const FieldSpec& column = columns[f.columns.front()];
      const size_t part_bytes =
          static_cast<size_t>(column.ElementsPerSample()) * DTypeSize(f.spec.dtype);
      InterleaveColumns(parts, part_bytes, out.rows, out.fields[o]);
    }
  }

  // Inner field `c`'s rows (read at `rows`) as `dtype`: themselves, or converted beside them.
  const std::byte* Converted(int c, const std::byte* rows, DType dtype,
                             std::span<const int64_t> indices, StackedWorkerState& s) const {
    const FieldSpec& column = inner_->schema().fields[c];
    if (column.dtype == dtype) return rows;
    const int64_t per_sample = column.ElementsPerSample();
    const int64_t count = per_sample * static_cast<int64_t>(indices.size());
    auto& converted = s.converted[c];
    converted.resize(static_cast<size_t>(count) * DTypeSize(dtype));
    const int64_t bad = ConvertElements(column.dtype, rows, dtype, converted.data(), count);
    if (bad >= 0) {
      const size_t row = static_cast<size_t>(bad / std::max<int64_t>(per_sample, 1));
      throw Error(
          ErrorCode::kCorruptData,
          fmt::format("{}: field '{}', sample {}: {} as {}: {}", inner_->Describe(), column.name,
                      indices[row], column.ToString(), DTypeName(dtype),
                      RefusalReason(column.dtype, rows + bad * DTypeSize(column.dtype), dtype)));
    }
    return converted.data();
  }

  const std::shared_ptr<Source> inner_;
  const StackPlan plan_;
  Schema schema_;
  // Per inner field: the output field it is read straight into (one column, same dtype and
  // shape), or -1.
  std::vector<int> direct_;
};

}  // namespace

std::shared_ptr<Source> StackFields(std::shared_ptr<Source> inner,
                                    std::vector<StackedField> select) {
  if (inner == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, "StackFields: no source given");
  }
  if (select.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: no fields to make (select is empty)", inner->Describe()));
  }
  StackPlan plan = PlanStack(inner->schema(), select, inner->Describe());
  return std::make_shared<StackedSource>(std::move(inner), std::move(plan));
}

}  // namespace gpufeed
