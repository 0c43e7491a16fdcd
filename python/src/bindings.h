// The pieces of the gpufeed._gpufeed module, each registered by its own file.
#pragma once

#include <pybind11/pybind11.h>

namespace gpufeed::python {

namespace py = pybind11;

// gpufeed.Error and one subclass per ErrorCode, plus the C++ -> Python translator.
void BindErrors(py::module_& m);
// Source, open_path, synthetic, memory, and the sampler's plan for tests.
void BindSources(py::module_& m);
// ImageSource and open_images (called by BindSources).
void BindImages(py::module_& m);
// ragged_memory, length_summary, read_items.
void BindVarlen(py::module_& m);
// BatchHandle and FieldArray: DLPack exports of a batch's fields.
void BindBatch(py::module_& m);
// _Loader: the C++ Loader with the GIL released while it waits.
void BindLoader(py::module_& m);
// _GroupTable, read_groups, group_table, batch_groups: grouped data.
void BindGroups(py::module_& m);
// Monitor, where the monitor part is built.
void BindMonitor(py::module_& m);
// diagnose(), where the doctor part is built.
void BindDoctor(py::module_& m);
// set_remote_options, remote_stats, remote_manifest, list_remote, add_remote_manifest.
void BindRemote(py::module_& m);

}  // namespace gpufeed::python
