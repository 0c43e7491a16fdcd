#include "pipeline/batch_layout.h"

#include <algorithm>

#include "core/checked_math.h"

namespace gpufeed {
namespace {

constexpr size_t kFieldAlignment = 256;  // what CUDA's allocators give; fine for AVX too

}  // namespace

BatchLayout::BatchLayout(const Schema& source_schema,
                         const std::vector<std::shared_ptr<Transform>>& transforms,
                         int64_t batch_size) {
  stages_.push_back(source_schema);
  for (const auto& transform : transforms) {
    stages_.push_back(transform->OutputSchema(stages_.back()));
  }
  const size_t fields = source_schema.fields.size();
  size_t offset = 0;
  for (size_t f = 0; f < fields; ++f) {
    size_t row_bytes = 0;
    for (const auto& stage : stages_)
      row_bytes = std::max(row_bytes, stage.fields[f].SampleBytes());
    offsets_.push_back(offset);
    row_bytes_ += row_bytes;
    // Checked: a batch size times a sample size from a file must not wrap to a small buffer.
    const std::string what = "the batch buffer for field '" + stages_.back().fields[f].name + "'";
    const uint64_t bytes =
        std::max<uint64_t>(1, MulOrThrow(row_bytes, static_cast<uint64_t>(batch_size), what,
                                         ErrorCode::kInvalidArgument));
    offset = AddOrThrow(offset,
                        AddOrThrow(bytes, kFieldAlignment - 1, what, ErrorCode::kInvalidArgument),
                        what, ErrorCode::kInvalidArgument);
    offset = offset / kFieldAlignment * kFieldAlignment;
  }
  buffer_bytes_ = std::max<size_t>(offset, kFieldAlignment);
}

BatchView BatchLayout::View(std::byte* base, int64_t rows) const {
  BatchView view;
  view.rows = rows;
  for (size_t offset : offsets_) view.fields.push_back(base + offset);
  return view;
}

std::vector<BatchLayout::Region> BatchLayout::CopyRegions(int64_t rows) const {
  std::vector<Region> regions;
  const Schema& out = output_schema();
  for (size_t f = 0; f < offsets_.size(); ++f) {
    const size_t bytes = out.fields[f].SampleBytes() * static_cast<size_t>(rows);
    if (bytes == 0) continue;
    // Adjacent regions merge into one copy: full batches usually become a single copy.
    if (!regions.empty() && regions.back().offset + regions.back().bytes == offsets_[f]) {
      regions.back().bytes += bytes;
    } else {
      regions.push_back({offsets_[f], bytes});
    }
  }
  return regions;
}

}  // namespace gpufeed
