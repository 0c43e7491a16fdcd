// The ragged source: variable-length fields held in memory as values plus offsets (and fixed
// fields beside them), served with no copy at open time.
#include <fmt/format.h>

#include <cstring>
#include <set>

#include "core/row_gather.h"
#include "gpufeed/error.h"
#include "gpufeed/varlen.h"

namespace gpufeed {
namespace {

class RaggedSource final : public Source {
 public:
  RaggedSource(std::vector<RaggedField> ragged, std::vector<MemoryField> fixed,
               std::shared_ptr<const void> owner)
      : ragged_(std::move(ragged)), fixed_(std::move(fixed)), owner_(std::move(owner)) {
    for (const auto& r : ragged_) {
      schema_.fields.push_back(r.spec);
      item_bytes_.push_back(r.spec.ItemBytes());
    }
    for (const auto& f : fixed_) {
      schema_.fields.push_back(f.spec);
      row_bytes_.push_back(f.spec.SampleBytes());
    }
    samples_ = ragged_.front().samples;
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  std::string Describe() const override {
    return fmt::format("ragged memory ({} fields, {} samples)", schema_.fields.size(), samples_);
  }
  // The arrays' addresses identify them for as long as `owner` keeps them alive.
  bool shareable_across_processes() const override { return false; }
  // Already in memory: a copy reads no faster.
  bool copy_speeds_reads() const override { return false; }
  std::string Identity() const override {
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
    const size_t first_fixed = ragged_.size();
    for (size_t f = 0; f < fixed_.size(); ++f) {
      GatherRows(static_cast<const std::byte*>(fixed_[f].data), row_bytes_[f], indices,
                 out.fields[first_fixed + f]);
    }
  }

  void ReadLengths(int field, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState*) const override {
    const RaggedField& r = Ragged(field);
    GPUFEED_ASSERT(lengths.size() == indices.size(), "one length per index");
    for (size_t i = 0; i < indices.size(); ++i) {
      CheckIndex(indices[i]);
      lengths[i] = r.offsets[indices[i] + 1] - r.offsets[indices[i]];
    }
  }

  void ReadItems(int field, int64_t index, int64_t first, std::span<std::byte> out,
                 SourceWorkerState*) const override {
    const RaggedField& r = Ragged(field);
    CheckIndex(index);
    const int64_t start = r.offsets[index];
    CheckItemsRequest(*this, field, index, first, out, r.offsets[index + 1] - start);
    if (out.empty()) return;
    const size_t item = item_bytes_[static_cast<size_t>(field)];
    std::memcpy(out.data(),
                static_cast<const std::byte*>(r.values) + static_cast<size_t>(start + first) * item,
                out.size());
  }

 private:
  const RaggedField& Ragged(int field) const {
    if (field < 0 || static_cast<size_t>(field) >= ragged_.size()) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: field number {} is not a variable-length field", Describe(), field));
    }
    return ragged_[static_cast<size_t>(field)];
  }
  void CheckIndex(int64_t index) const {
    if (index < 0 || index >= samples_) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: sample index {} is out of range [0, {})", Describe(), index, samples_));
    }
  }

  const std::vector<RaggedField> ragged_;
  const std::vector<MemoryField> fixed_;
  const std::shared_ptr<const void> owner_;
  Schema schema_;
  std::vector<size_t> item_bytes_;
  std::vector<size_t> row_bytes_;
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

}  // namespace

std::shared_ptr<Source> OpenRagged(std::vector<RaggedField> ragged, std::vector<MemoryField> fixed,
                                   std::shared_ptr<const void> owner) {
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
  return std::make_shared<RaggedSource>(std::move(ragged), std::move(fixed), std::move(owner));
}

}  // namespace gpufeed
