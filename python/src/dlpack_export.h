// Exports one field of a Batch as a DLPack tensor. The capsule's deleter drops a reference to
// the Batch, so the batch buffer goes back to its pool only once every tensor made from it
// (and every unconsumed capsule) is gone. The deleter touches no Python object: torch calls
// it from whatever thread frees the storage, without the GIL.
// Thread-safety: ExportField needs the GIL (it makes a capsule); the deleter does not.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "dlpack.h"
#include "gpufeed/loader.h"

namespace gpufeed::python {

namespace py = pybind11;

// (device_type, device_id) as __dlpack_device__ reports them.
std::pair<int, int> DlpackDevice(const FieldView& field);

// A "dltensor" capsule holding field `index` of `batch` as [rows, ...shape], C order. Bool
// fields travel as uint8 (torch 1.13's DLPack has no bool code); the Python side views them
// back as bool. Throws Error(kUnsupported) for a dtype DLPack consumers cannot take.
py::capsule ExportField(const std::shared_ptr<const Batch>& batch, int index);

// Makes the consumer's CUDA stream wait for the batch's copy, following the DLPack
// `stream` convention: None or 1 = the legacy default stream, 2 = per-thread default,
// > 2 a CUstream handle, -1 = no synchronization. A no-op for host batches.
void WaitForConsumer(const Batch& batch, const py::object& stream);

}  // namespace gpufeed::python
