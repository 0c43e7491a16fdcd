// BatchLayout: where each field of a batch lives inside one batch buffer. Every field gets
// a 256-byte aligned region of batch_size rows, sized for the widest dtype the field takes
// along the transform chain (transforms work in place), so one allocation holds a batch.
// Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpufeed/schema.h"
#include "gpufeed/source.h"
#include "gpufeed/transforms.h"

namespace gpufeed {

class BatchLayout {
 public:
  struct Region {
    size_t offset;
    size_t bytes;
  };

  // Throws what a transform throws for a schema it cannot take.
  BatchLayout(const Schema& source_schema,
              const std::vector<std::shared_ptr<Transform>>& transforms, int64_t batch_size);

  const Schema& output_schema() const { return stages_.back(); }
  // The schema the i-th transform receives.
  const Schema& stage_schema(size_t i) const { return stages_[i]; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  // Bytes a sample takes in the buffer, over all fields (each at its widest along the chain).
  size_t row_bytes() const { return row_bytes_; }
  // Field pointers into the buffer at `base` for a batch of `rows`.
  BatchView View(std::byte* base, int64_t rows) const;
  // The bytes a device copy must move for a batch of `rows` (output layout).
  std::vector<Region> CopyRegions(int64_t rows) const;

 private:
  std::vector<Schema> stages_;  // source schema, then after each transform
  std::vector<size_t> offsets_;
  size_t buffer_bytes_ = 0;
  size_t row_bytes_ = 0;
};

}  // namespace gpufeed
