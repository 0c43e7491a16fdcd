// BatchHandle: one delivered Batch as Python sees it, shared by the DLPack capsules of its
// fields. The batch buffer returns to the loader's pool when the handle and every tensor
// made from it are gone, on whichever thread drops the last one.
// Thread-safety: used under the GIL; the Batch it shares may be dropped on any thread.
#pragma once

#include <memory>
#include <utility>

#include "gpufeed/loader.h"

namespace gpufeed::python {

class BatchHandle {
 public:
  explicit BatchHandle(std::shared_ptr<const Batch> batch) : batch_(std::move(batch)) {}
  const std::shared_ptr<const Batch>& batch() const { return batch_; }

 private:
  std::shared_ptr<const Batch> batch_;
};

}  // namespace gpufeed::python
