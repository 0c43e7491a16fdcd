#include "pipeline/groups/group_source.h"

#include <fmt/format.h>

#include <cstring>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

class GroupIdSource final : public Source {
 public:
  GroupIdSource(std::shared_ptr<Source> inner, std::shared_ptr<const GroupTable> groups)
      : inner_(std::move(inner)), groups_(std::move(groups)), schema_(inner_->schema()) {
    schema_.fields.push_back(FieldSpec{kGroupField, DType::kInt64, {}});
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return inner_->size(); }
  std::string Describe() const override {
    return fmt::format("{} grouped by {}", inner_->Describe(), groups_->name());
  }
  std::string Identity() const override { return inner_->Identity() + "|" + groups_->Identity(); }
  int64_t PreferredBlock() const override { return inner_->PreferredBlock(); }
  SourceChunking chunking() const override { return inner_->chunking(); }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    return inner_->NewWorkerState();
  }
  CacheTier cache_tier() const override { return inner_->cache_tier(); }
  bool shareable_across_processes() const override { return inner_->shareable_across_processes(); }
  bool rows_repeat() const override { return inner_->rows_repeat(); }
  bool ReadsAhead() const override { return inner_->ReadsAhead(); }
  int64_t ReadAheadSamples() const override { return inner_->ReadAheadSamples(); }
  void ReadAhead(std::span<const int64_t> indices, SourceWorkerState* state) const override {
    inner_->ReadAhead(indices, state);
  }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    ReadSeeded(indices, out, state, 0);
  }

  void ReadSeeded(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
                  uint64_t seed) const override {
    CheckReadRequest(*this, indices, out);
    BatchView inner{std::vector<std::byte*>(out.fields.begin(), out.fields.end() - 1), out.rows};
    inner_->ReadSeeded(indices, inner, state, seed);
    std::byte* ids = out.fields.back();
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t group = groups_->GroupOf(indices[i]);
      std::memcpy(ids + i * sizeof(int64_t), &group, sizeof(int64_t));
    }
  }

 private:
  const std::shared_ptr<Source> inner_;
  const std::shared_ptr<const GroupTable> groups_;
  Schema schema_;
};

}  // namespace

std::shared_ptr<Source> WithGroupIds(std::shared_ptr<Source> source,
                                     std::shared_ptr<const GroupTable> groups) {
  if (!source || !groups) return source;
  if (source->schema().IndexOf(kGroupField) >= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} has a field named '{}', the name of the per-row group id a "
                            "grouped loader adds: leave it out of the fields (the group ids are "
                            "read by the grouping) or rename it",
                            source->Describe(), kGroupField));
  }
  if (groups->num_rows() != source->size()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("groups {} cover {} rows, {} has {}", groups->name(),
                            groups->num_rows(), source->Describe(), source->size()));
  }
  return std::make_shared<GroupIdSource>(std::move(source), std::move(groups));
}

}  // namespace gpufeed
