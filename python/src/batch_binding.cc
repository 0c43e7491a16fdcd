// BatchHandle and FieldArray: a batch's fields as DLPack producers. The package turns them
// into torch tensors with torch's own importer (the fast path: `capsules()`), and any
// DLPack consumer can take a FieldArray through `__dlpack__` / `__dlpack_device__`.
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>

#include "batch_handle.h"
#include "bindings.h"
#include "dlpack_export.h"
#include "gpufeed/error.h"

namespace gpufeed::python {
namespace {

// One field of a batch, exported on demand through the DLPack protocol.
// Thread-safety: used under the GIL.
class FieldArray {
 public:
  FieldArray(std::shared_ptr<const Batch> batch, int index)
      : batch_(std::move(batch)), index_(index) {}

  const std::shared_ptr<const Batch>& batch() const { return batch_; }
  int index() const { return index_; }
  const FieldSpec& spec() const { return batch_->schema().fields[static_cast<size_t>(index_)]; }

 private:
  std::shared_ptr<const Batch> batch_;
  int index_;
};

int FieldIndex(const Batch& batch, const py::object& field) {
  if (py::isinstance<py::str>(field)) {
    const auto name = field.cast<std::string>();
    batch.schema().Field(name);  // throws NotFound naming the fields
    return batch.schema().IndexOf(name);
  }
  const auto index = field.cast<int64_t>();
  const auto count = static_cast<int64_t>(batch.schema().fields.size());
  if (index < 0 || index >= count) {
    throw Error(
        ErrorCode::kNotFound,
        fmt::format("field index {} is out of range: the batch has {} fields", index, count));
  }
  return static_cast<int>(index);
}

py::tuple ShapeOf(const Batch& batch, const FieldSpec& spec) {
  py::tuple shape(spec.shape.size() + 1);
  shape[0] = batch.size();
  for (size_t d = 0; d < spec.shape.size(); ++d) shape[d + 1] = spec.shape[d];
  return shape;
}

// The array-API keywords beyond `stream`: a device other than ours or a forced copy cannot be
// honoured (the export is zero-copy, where the batch is); max_version is answered with the
// legacy capsule, which every torch release imports.
void CheckDlpackKeywords(const FieldArray& array, const py::kwargs& kwargs) {
  if (kwargs.contains("copy") && !kwargs["copy"].is_none() && kwargs["copy"].cast<bool>()) {
    throw py::buffer_error("gpufeed exports batches zero-copy; copy=True is not supported");
  }
  if (kwargs.contains("dl_device") && !kwargs["dl_device"].is_none()) {
    const auto wanted = kwargs["dl_device"].cast<std::pair<int, int>>();
    const auto have = DlpackDevice(array.batch()->field(array.index()));
    if (wanted != have) {
      throw py::buffer_error(fmt::format("the batch is on DLPack device ({}, {}), not ({}, {})",
                                         have.first, have.second, wanted.first, wanted.second));
    }
  }
}

}  // namespace

void BindBatch(py::module_& m) {
  py::class_<FieldArray>(m, "FieldArray",
                         "One field of a batch, a DLPack producer (torch.from_dlpack takes it).")
      .def_property_readonly("name", [](const FieldArray& a) { return a.spec().name; })
      .def_property_readonly(
          "dtype", [](const FieldArray& a) { return std::string(DTypeName(a.spec().dtype)); })
      .def_property_readonly("shape",
                             [](const FieldArray& a) { return ShapeOf(*a.batch(), a.spec()); })
      .def("__dlpack_device__",
           [](const FieldArray& a) { return DlpackDevice(a.batch()->field(a.index())); })
      .def(
          "__dlpack__",
          [](const FieldArray& a, const py::object& stream, const py::kwargs& kwargs) {
            CheckDlpackKeywords(a, kwargs);
            WaitForConsumer(*a.batch(), stream);
            return ExportField(a.batch(), a.index());
          },
          py::arg("stream") = py::none(),
          "A DLPack capsule of the field. `stream` (the consumer's CUDA stream; None or 1 = "
          "the legacy default stream, 2 = per-thread default) is made to wait for the batch's "
          "copy. The loader also times the GPU's work on that stream: it records an event on it "
          "at the next call for a batch and when the batch is dropped, so the stream must stay "
          "alive until both.");

  py::class_<BatchHandle>(m, "BatchHandle", "A delivered batch, shared by its tensors.")
      .def_property_readonly("epoch", [](const BatchHandle& h) { return h.batch()->epoch(); })
      .def_property_readonly("index", [](const BatchHandle& h) { return h.batch()->index(); })
      .def_property_readonly("size", [](const BatchHandle& h) { return h.batch()->size(); })
      .def("__len__", [](const BatchHandle& h) { return h.batch()->size(); })
      .def_property_readonly("device",
                             [](const BatchHandle& h) {
                               if (h.batch()->schema().fields.empty()) return std::pair{1, 0};
                               return DlpackDevice(h.batch()->field(0));
                             })
      .def(
          "indices",
          [](const BatchHandle& h) {
            const auto indices = h.batch()->indices();
            return py::array_t<int64_t>(static_cast<py::ssize_t>(indices.size()), indices.data());
          },
          "The sample indices of the rows, in row order (a copy).")
      .def(
          "capsules",
          [](const BatchHandle& h, const py::object& stream) {
            WaitForConsumer(*h.batch(), stream);
            const auto count = h.batch()->schema().fields.size();
            py::tuple out(count);
            for (size_t i = 0; i < count; ++i) out[i] = ExportField(h.batch(), static_cast<int>(i));
            return out;
          },
          py::arg("stream") = py::none(),
          "One DLPack capsule per field, in schema order, after making `stream` wait for the "
          "batch's copy.")
      .def(
          "field",
          [](const BatchHandle& h, const py::object& field) {
            return FieldArray(h.batch(), FieldIndex(*h.batch(), field));
          },
          py::arg("field"))
      .def(
          "synchronize",
          [](const BatchHandle& h) {
            py::gil_scoped_release release;
            h.batch()->Synchronize();
          },
          "Blocks until the batch's copy to the device has completed.");
}

}  // namespace gpufeed::python
