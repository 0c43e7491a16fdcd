#include "pipeline/batch_layout.h"

#include <algorithm>

namespace gpufeed {
namespace {

constexpr size_t kFieldAlignment = 256;  // what CUDA's allocators give; fine for AVX too

size_t AlignUp(size_t n) { return (n + kFieldAlignment - 1) / kFieldAlignment * kFieldAlignment; }

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
    for (const auto& stage : stages_) row_bytes = std::max(row_bytes, stage.fields[f].SampleBytes());
    offsets_.push_back(offset);
    offset += AlignUp(std::max<size_t>(1, row_bytes * static_cast<size_t>(batch_size)));
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
