// Variable-length fields as Python sees them: ragged arrays in memory, a field's length
// summary, one sample's items. (How a loader batches them is its _LoaderOptions'.)
#include <Python.h>
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/varlen.h"

namespace gpufeed::python {
namespace {

// (name, dtype, item shape, values address, items, offsets address, samples)
using RaggedTuple = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, int64_t,
                               uintptr_t, int64_t>;
// (name, dtype, per-sample shape, address, samples), as memory() takes them
using FixedTuple = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, int64_t>;

DType NamedDType(const std::string& name) {
  const auto dtype = ParseDType(name);
  if (!dtype) {
    throw Error(ErrorCode::kUnsupported, fmt::format("dtype '{}' is not one gpufeed reads", name));
  }
  return *dtype;
}

// Keeps the arrays behind a source alive; released with the GIL (the source may die on a
// thread without it).
std::shared_ptr<const void> Hold(const py::object& object) {
  return std::shared_ptr<const void>(new py::object(object), [](const void* p) {
    auto* held = static_cast<py::object*>(const_cast<void*>(p));
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete held;
  });
}

}  // namespace

void BindVarlen(py::module_& m) {
  m.def(
      "ragged_memory",
      [](const std::vector<RaggedTuple>& ragged, const std::vector<FixedTuple>& fixed,
         const py::object& owner) {
        std::vector<RaggedField> r;
        for (const auto& [name, dtype, item_shape, values, items, offsets, samples] : ragged) {
          FieldSpec spec{name, NamedDType(dtype), {kVariableDim}};
          spec.shape.insert(spec.shape.end(), item_shape.begin(), item_shape.end());
          r.push_back({.spec = spec,
                       .values = reinterpret_cast<const void*>(values),
                       .items = items,
                       .offsets = reinterpret_cast<const int64_t*>(offsets),
                       .samples = samples});
        }
        std::vector<MemoryField> f;
        for (const auto& [name, dtype, shape, address, samples] : fixed) {
          f.push_back({FieldSpec{name, NamedDType(dtype), shape},
                       reinterpret_cast<const void*>(address), samples});
        }
        return OpenRagged(std::move(r), std::move(f), Hold(owner));
      },
      py::arg("ragged"), py::arg("fixed"), py::arg("owner"),
      "Ragged arrays in memory, zero-copy: ragged is (name, dtype, item shape, values address, "
      "items, int64 offsets address, samples); fixed as memory() takes them.");
  m.def(
      "length_summary",
      [](const Source& source, const std::string& field) {
        const int index = source.schema().IndexOf(field);
        if (index < 0 || !source.schema().fields[static_cast<size_t>(index)].variable()) {
          throw Error(
              ErrorCode::kInvalidArgument,
              fmt::format("'{}' is not a variable-length field of {}", field, source.Describe()));
        }
        LengthSummary s;
        {
          py::gil_scoped_release release;
          s = SummarizeLengths(source, index);
        }
        py::dict d;
        d["samples"] = s.samples;
        d["total"] = s.total;
        py::dict p;
        for (const auto& [percent, length] : s.percentiles) p[py::int_(percent)] = length;
        d["percentiles"] = p;
        return d;
      },
      py::arg("source"), py::arg("field"));
  m.def(
      "read_items",
      [](const Source& source, const std::string& field, int64_t index) {
        const int f = source.schema().IndexOf(field);
        if (f < 0) throw Error(ErrorCode::kNotFound, fmt::format("no field '{}'", field));
        const int64_t indices[1] = {index};
        int64_t length = 0;
        source.ReadLengths(f, indices, {&length, 1}, nullptr);
        const size_t item = source.schema().fields[static_cast<size_t>(f)].ItemBytes();
        std::string bytes(static_cast<size_t>(length) * item, '\0');
        source.ReadItems(f, index, 0, std::as_writable_bytes(std::span(bytes)), nullptr);
        return py::bytes(bytes);
      },
      py::arg("source"), py::arg("field"), py::arg("index"),
      "The items of one sample of a variable-length field, as bytes (for tests and inspection).");
}

}  // namespace gpufeed::python
