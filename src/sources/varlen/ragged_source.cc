// The ragged source: variable-length fields held in memory as values plus offsets (and fixed
// fields beside them), served with no copy at open time.
#include "sources/varlen/ragged_source.h"

#include <fmt/format.h>

#include <cstring>
#include <set>

#include "core/row_gather.h"
#include "gpufeed/error.h"
#include "gpufeed/varlen.h"

namespace gpufeed {
namespace {

// Where schema field f lives: ragged_[index] or fixed_[index].
struct RaggedSlot {
  bool ragged = true;
  size_t index = 0;
};

class RaggedSource final : public Source {
 public:
  // `order`: the fields' names in schema order (empty: the ragged fields, then the fixed).
  // `what` and `identity` empty: arrays a caller lent, known by their addresses.
  RaggedSource(std::vector<RaggedField> ragged, std::vector<MemoryField> fixed,
               std::shared_ptr<const void> owner, const std::vector<std::string>& order,
               std::string what, std::string identity)
      : ragged_(std::move(ragged)),
        fixed_(std::move(fixed)),
        owner_(std::move(owner)),
        what_(what.empty() ? "ragged memory" : std::move(what)),
        identity_(std::move(identity)) {
    for (size_t r = 0; r < ragged_.size(); ++r) slots_.push_back({true, r});
    for (size_t f = 0; f < fixed_.size(); ++f) slots_.push_back({false, f});
    if (!order.empty()) {
      std::vector<RaggedSlot> ordered;
      for (const std::string& name : order) {
        for (const RaggedSlot& slot : slots_) {
          if (Spec(slot).name == name) ordered.push_back(slot);
        }
      }
      GPUFEED_ASSERT(ordered.size() == slots_.size(), "the order names every field once");
      slots_ = std::move(ordered);
    }
    for (const RaggedSlot& slot : slots_) schema_.fields.push_back(Spec(slot));
    samples_ = ragged_.front().samples;
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  std::string Describe() const override {
    return fmt::format("{} ({} fields, {} samples)", what_, schema_.fields.size(), samples_);
  }
  // Without an identity of its own, the arrays' addresses identify them for as long as
  // `owner` keeps them alive.
  bool shareable_across_processes() const override { return !identity_.empty(); }
  // Already in memory: a copy reads no faster.
  bool copy_speeds_reads() const override { return false; }
  std::string Identity() const override {
    if (!identity_.empty()) return identity_;
    std::string id = "ragged";
    for (const auto& r : ragged_) {
      id += fmt::format("|{}@{}:{}@{}:{}", r.spec.ToString(), r.values, r.items,
                        static_cast<const void*>(r.offsets), r.samples);
    }
    for (const auto& f : fixed_)
      id += fmt::format("|{}@{}:{}", f.spec.ToString(), f.data, f.samples);
    return id;
  }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState*) const override {
    CheckReadRequest(*this, indices, out);
    for (size_t f = 0; f < slots_.size(); ++f) {
      if (slots_[f].ragged) continue;  // ReadItems serves it
      const MemoryField& fixed = fixed_[slots_[f].index];
      GatherRows(static_cast<const std::byte*>(fixed.data), fixed.spec.SampleBytes(), indices,
                 out.fields[f]);
    }
  }

  void ReadLengths(int field, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState*) const override {
    const RaggedField& r = Ragged(field);
    GPUFEED_ASSERT(lengths.size() == indices.size(), "one length per index");
    for (size_t i = 0; i < indices.size(); ++i) {
      CheckSampleIndex(*this, indices[i]);
      lengths[i] = r.offsets[indices[i] + 1] - r.offsets[indices[i]];
    }
  }

  void ReadItems(int field, int64_t index, int64_t first, std::span<std::byte> out,
                 SourceWorkerState*) const override {
    const RaggedField& r = Ragged(field);
    CheckSampleIndex(*this, index);
    const int64_t start = r.offsets[index];
    CheckItemsRequest(*this, field, index, first, out, r.offsets[index + 1] - start);
    if (out.empty()) return;
    const size_t item = r.spec.ItemBytes();
    std::memcpy(out.data(),
                static_cast<const std::byte*>(r.values) + static_cast<size_t>(start + first) * item,
                out.size());
  }

 private:
  const FieldSpec& Spec(const RaggedSlot& slot) const {
    return slot.ragged ? ragged_[slot.index].spec : fixed_[slot.index].spec;
  }
  const RaggedField& Ragged(int field) const {
    if (field < 0 || static_cast<size_t>(field) >= slots_.size() ||
        !slots_[static_cast<size_t>(field)].ragged) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: field number {} is not a variable-length field", Describe(), field));
    }
    return ragged_[slots_[static_cast<size_t>(field)].index];
  }

  const std::vector<RaggedField> ragged_;
  const std::vector<MemoryField> fixed_;
  const std::shared_ptr<const void> owner_;
  const std::string what_;
  const std::string identity_;  // empty: the arrays' addresses
  std::vector<RaggedSlot> slots_;
  Schema schema_;
  int64_t samples_ = 0;
};

void CheckRagged(const RaggedField& r) {
  if (!r.spec.variable()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ragged source: field {} has no variable first dimension ('*')",
                            r.spec.ToString()));
  }
  const size_t item = r.spec.ItemBytes();
  if (r.samples < 0 || r.items < 0 || r.offsets == nullptr ||
      (r.values == nullptr && r.items > 0 && item > 0)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ragged source: field '{}' needs values and samples + 1 offsets "
                            "({} samples, {} items)",
                            r.spec.name, r.samples, r.items));
  }
  for (int64_t i = 0; i <= r.samples; ++i) {
    const int64_t o = r.offsets[i];
    if (o < 0 || o > r.items) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("ragged source: field '{}': offset {} (sample {}) is {}, outside "
                              "the {} values",
                              r.spec.name, i, i, o, r.items));
    }
    if (i > 0 && o < r.offsets[i - 1]) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("ragged source: field '{}': offsets run backwards at sample {} "
                              "({} after {})",
                              r.spec.name, i - 1, o, r.offsets[i - 1]));
    }
  }
}

// OpenRagged's checks; throws as it documents.
void CheckRaggedSource(const std::vector<RaggedField>& ragged,
                       const std::vector<MemoryField>& fixed) {
  if (ragged.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "ragged source: no variable-length field given");
  }
  std::set<std::string> names;
  for (const auto& r : ragged) {
    CheckRagged(r);
    if (!names.insert(r.spec.name).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("ragged source: field '{}' appears twice", r.spec.name));
    }
    if (r.samples != ragged.front().samples) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("ragged source: fields have different sample counts: '{}' has {}, "
                      "'{}' has {}",
                      ragged.front().spec.name, ragged.front().samples, r.spec.name, r.samples));
    }
  }
  for (const auto& f : fixed) {
    if (f.spec.variable() || !names.insert(f.spec.name).second ||
        f.samples != ragged.front().samples || (f.data == nullptr && f.samples > 0)) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("ragged source: fixed field {} ({} samples) must be named once, "
                              "hold data and have the {} samples of the ragged fields",
                              f.spec.ToString(), f.samples, ragged.front().samples));
    }
  }
}

}  // namespace

std::shared_ptr<Source> OpenRagged(std::vector<RaggedField> ragged, std::vector<MemoryField> fixed,
                                   std::shared_ptr<const void> owner) {
  CheckRaggedSource(ragged, fixed);
  return std::make_shared<RaggedSource>(std::move(ragged), std::move(fixed), std::move(owner),
                                        std::vector<std::string>{}, "", "");
}

std::shared_ptr<Source> NewNamedRaggedSource(std::vector<RaggedField> ragged,
                                             std::vector<MemoryField> fixed,
                                             std::shared_ptr<const void> owner,
                                             const std::vector<std::string>& order,
                                             std::string what, std::string identity) {
  GPUFEED_ASSERT(!identity.empty(), "a named ragged source needs an identity");
  CheckRaggedSource(ragged, fixed);
  return std::make_shared<RaggedSource>(std::move(ragged), std::move(fixed), std::move(owner),
                                        order, std::move(what), std::move(identity));
}

}  // namespace gpufeed
