#include "dlpack_export.h"

#include <Python.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "gpufeed/error.h"

namespace gpufeed::python {
namespace {

constexpr const char* kCapsuleName = "dltensor";

// The DLManagedTensor comes first so the deleter can recover the whole struct from it.
struct ExportedField {
  DLManagedTensor managed{};
  std::shared_ptr<const Batch> batch;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};
static_assert(offsetof(ExportedField, managed) == 0);

void DeleteExported(DLManagedTensor* managed) {
  delete static_cast<ExportedField*>(managed->manager_ctx);
}

// A capsule nobody consumed still owns its tensor; a consumed one ("used_dltensor") was
// handed to its consumer, which calls the deleter itself.
void DestroyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

DLDataType ToDlpack(DType dtype) {
  const auto bits = static_cast<uint8_t>(DTypeSize(dtype) * 8);
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return {kDLUInt, bits, 1};
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return {kDLInt, bits, 1};
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
      return {kDLFloat, bits, 1};
    case DType::kBFloat16:
      return {kDLBfloat, bits, 1};
  }
  throw Error(ErrorCode::kUnsupported,
              fmt::format("dtype {} has no DLPack code", static_cast<int>(dtype)));
}

}  // namespace

std::pair<int, int> DlpackDevice(const FieldView& field) {
  // Pinned host memory is exported as plain CPU memory: torch rejects kDLCUDAHost.
  if (field.device.is_cuda()) return {kDLCUDA, field.device.ordinal};
  return {kDLCPU, 0};
}

py::capsule ExportField(const std::shared_ptr<const Batch>& batch, int index) {
  const FieldView view = batch->field(index);
  auto exported = std::make_unique<ExportedField>();
  exported->batch = batch;
  exported->shape.reserve(view.spec->shape.size() + 1);
  exported->shape.push_back(view.rows);
  exported->shape.insert(exported->shape.end(), view.spec->shape.begin(), view.spec->shape.end());
  exported->strides.assign(exported->shape.size(), 1);
  for (size_t d = exported->shape.size() - 1; d > 0; --d) {
    // DLPack importers want stride 1 on size-1 and size-0 axes; C order otherwise.
    exported->strides[d - 1] = exported->strides[d] * std::max<int64_t>(1, exported->shape[d]);
  }
  const auto [device_type, device_id] = DlpackDevice(view);
  DLTensor& t = exported->managed.dl_tensor;
  t.data = view.data;
  t.device = {device_type, device_id};
  t.ndim = static_cast<int32_t>(exported->shape.size());
  t.dtype = ToDlpack(view.spec->dtype);
  t.shape = exported->shape.data();
  t.strides = exported->strides.data();
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = &DeleteExported;

  PyObject* capsule = PyCapsule_New(&exported->managed, kCapsuleName, &DestroyCapsule);
  if (capsule == nullptr) throw py::error_already_set();
  exported.release();  // owned by the capsule, then by its consumer
  return py::reinterpret_steal<py::capsule>(capsule);
}

void WaitForConsumer(const Batch& batch, const py::object& stream) {
  if (batch.size() == 0 || batch.schema().fields.empty()) return;
  if (!batch.field(0).device.is_cuda()) return;  // host batches are ready
  if (stream.is_none()) {
    batch.WaitOn(0);  // the legacy default stream
    return;
  }
  const auto value = stream.cast<int64_t>();
  if (value == -1) return;  // the consumer synchronizes itself
  if (value == 0 || value < -1) {
    throw py::buffer_error(fmt::format(
        "__dlpack__: stream {} is not valid for CUDA (None or 1 = legacy default stream, "
        "2 = per-thread default stream, a CUstream handle, or -1)",
        value));
  }
  batch.WaitOn(value == 1 ? 0 : static_cast<uintptr_t>(value));
}

}  // namespace gpufeed::python
