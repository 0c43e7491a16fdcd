// Batch: one delivered batch of a Loader (its epoch and index, the sample indices of its rows,
// the groups of a packed batch, and one FieldView per field: rows of one field, contiguous, in
// C order, on the loader's device), with the event after its copy to the device. A batch owns
// its buffer; dropping it hands the buffer back to the loader's pool.
// Thread-safety: read by one consumer thread at a time; may be dropped on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "gpufeed/device.h"
#include "gpufeed/groups.h"
#include "gpufeed/schema.h"

namespace gpufeed {

// Where one field of a batch lives: `rows` samples of `spec`, contiguous, C order.
struct FieldView {
  const FieldSpec* spec = nullptr;
  void* data = nullptr;
  int64_t rows = 0;
  DeviceId device;

  size_t bytes() const { return static_cast<size_t>(rows) * spec->SampleBytes(); }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

class Batch {
 public:
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }  // batch number within the epoch
  int64_t size() const { return rows_; }
  const Schema& schema() const { return *schema_; }
  // The sample indices of the rows, in row order.
  std::span<const int64_t> indices() const { return indices_; }
  // The group parts of the batch, in row order (packed groups only; else empty).
  std::span<const BatchGroup> groups() const { return groups_; }
  // Throws Error(kNotFound) naming the fields when there is no such field.
  FieldView field(std::string_view name) const;
  FieldView field(int index) const;
  // The event after the batch's copy (null on the host): no consumer may read the batch
  // before it. WaitOn makes a consumer CUDA stream wait for it; Synchronize blocks the host.
  // WaitOn also names the stream the loader times the GPU's step on (LoaderStats::gpu_*): it
  // records a timing event on `stream` at the loader's next Next() call, and when this batch
  // is dropped, so the stream must stay alive until both.
  const std::shared_ptr<DeviceEvent>& ready_event() const { return ready_; }
  void WaitOn(uintptr_t stream) const;
  void Synchronize() const;

 private:
  friend class BatchBuilder;  // makes them
  struct Parts;
  explicit Batch(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
  const Schema* schema_ = nullptr;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
  int64_t rows_ = 0;
  std::vector<int64_t> indices_;
  std::vector<BatchGroup> groups_;
  std::vector<std::byte*> fields_;
  std::shared_ptr<DeviceEvent> ready_;
};

}  // namespace gpufeed
