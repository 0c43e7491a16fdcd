// Sources as Python sees them: opened from a path, made synthetic, or wrapping NumPy arrays
// and torch tensors in place. Also the sampler's plan, so tests can check the loader against
// the C++ sampler without going through the loader.
#include <Python.h>
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/sources.h"
#include "gpufeed/stack.h"
#include "interruptible.h"
#include "pipeline/sampler.h"

namespace gpufeed::python {
namespace {

DType DTypeFromName(const std::string& name) {
  const auto dtype = ParseDType(name);
  if (!dtype) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("dtype '{}' is not one gpufeed reads (bool, int8..int64, "
                            "uint8..uint64, float16, bfloat16, float32, float64)",
                            name));
  }
  return *dtype;
}

py::list SchemaToList(const Schema& schema) {
  py::list out;
  for (const FieldSpec& f : schema.fields) {
    out.append(
        py::make_tuple(f.name, std::string(DTypeName(f.dtype)), py::tuple(py::cast(f.shape))));
  }
  return out;
}

// Keeps the Python objects behind a memory source alive. The source may die on a thread
// without the GIL (a loader closed with the GIL released), so the release takes it.
std::shared_ptr<const void> HoldPythonObject(const py::object& object) {
  return std::shared_ptr<const void>(new py::object(object), [](const void* p) {
    auto* held = static_cast<py::object*>(const_cast<void*>(p));
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing left to release
    py::gil_scoped_acquire gil;
    delete held;
  });
}

using MemoryFieldTuple =
    std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, int64_t>;

void BindFileSources(py::module_& m);
void BindTestingHelpers(py::module_& m);
void BindStacking(py::module_& m);

}  // namespace

void BindSources(py::module_& m) {
  py::class_<Source, std::shared_ptr<Source>>(m, "Source", "A data set gpufeed reads samples from.")
      .def_property_readonly(
          "schema", [](const Source& s) { return SchemaToList(s.schema()); },
          "[(name, dtype, per-sample shape), ...]")
      .def("__len__", &Source::size)
      .def("describe", &Source::Describe)
      .def("identity", &Source::Identity)
      .def_property_readonly("preferred_block", &Source::PreferredBlock)
      .def("__repr__", [](const Source& s) { return "<gpufeed.Source " + s.Describe() + ">"; });

  m.def(
      "open_path",
      [](const std::string& path, const std::vector<std::string>& fields) {
        return RunInterruptible([&] { return OpenPath(path, fields); });  // Ctrl-C cancels
      },
      py::arg("path"), py::arg("fields") = std::vector<std::string>{},
      "The data set at `path`: a database URI (sqlite:///abs/path.db?table=T, "
      "postgresql://user@host/db?query=..., loaded into memory now), else by what lies at the "
      "path: a folder of .npy files (one per field) or an HDF5 file. `fields`: the datasets, "
      ".npy names or table columns to read (empty: all). gpufeed.open() documents each kind.");
  m.def("is_database_uri", &IsDatabaseUri, py::arg("path"),
        "Whether `path` names a database: it starts with sqlite:, postgresql: or postgres:.");

  BindFileSources(m);
  BindStacking(m);
  BindTestingHelpers(m);
  BindImages(m);
}

namespace {

// (field, [columns or patterns], stack, dtype name or None): a StackedField as Python spells
// it (gpufeed/_sources.py builds them from fields={...} and dtype={...}).
using StackedFieldTuple =
    std::tuple<std::string, std::vector<std::string>, bool, std::optional<std::string>>;

std::vector<StackedField> ToSelect(const std::vector<StackedFieldTuple>& select) {
  std::vector<StackedField> out;
  for (const auto& [name, columns, stack, dtype] : select) {
    out.push_back({.name = name,
                   .columns = columns,
                   .stack = stack,
                   .dtype = dtype ? std::optional<DType>(DTypeFromName(*dtype)) : std::nullopt});
  }
  return out;
}

// Fields made of several columns: a database stacks them as it loads, any other source as
// each batch is read.
void BindStacking(py::module_& m) {
  m.def(
      "stack_fields",
      [](std::shared_ptr<Source> source, const std::vector<StackedFieldTuple>& select) {
        return StackFields(std::move(source), ToSelect(select));
      },
      py::arg("source"), py::arg("select"),
      "`source` with fields made of its fields: select is [(field, [names or patterns], "
      "stack, dtype or None)].");
  m.def(
      "open_database",
      [](const std::string& uri, const std::vector<StackedFieldTuple>& select) {
        DatabaseOptions options;
        options.select = ToSelect(select);
        return RunInterruptible([&] { return OpenDatabase(uri, options); });  // Ctrl-C cancels
      },
      py::arg("uri"), py::arg("select"),
      "A database URI (sqlite:..., postgresql://...) loaded into the fields `select` makes.");
}

// The file sources: a path of either kind, HDF5 files, and an HDF5 source's counters.
void BindFileSources(py::module_& m) {
  m.def(
      "open_hdf5",
      [](const std::vector<std::string>& paths, const std::vector<std::string>& fields,
         std::optional<size_t> chunk_cache_bytes) {
        Hdf5Options options;
        if (chunk_cache_bytes) options.chunk_cache_bytes = *chunk_cache_bytes;
        // A file of many chunks may take a while to index: Ctrl-C cancels.
        return RunInterruptible([&] { return OpenHdf5(paths, fields, options); });
      },
      py::arg("paths"), py::arg("fields") = std::vector<std::string>{},
      py::arg("chunk_cache_bytes") = py::none(),
      "HDF5 files as one source: `fields` of every file, concatenated in the order given; "
      "chunk_cache_bytes: the decoded-chunk budget its workers share (None: automatic, 0: none).");
  m.def(
      "hdf5_counters",
      [](const Source& source) {
        const Hdf5Counters c = Hdf5SourceCounters(source);
        py::dict d;
        d["chunks_decoded"] = c.chunks_decoded;
        d["chunk_cache_hits"] = c.chunk_cache_hits;
        d["bytes_read"] = c.bytes_read;
        d["library_reads"] = c.library_reads;
        d["chunk_cache_bytes"] = c.chunk_cache_bytes;
        return d;
      },
      py::arg("source"), "An HDF5 source's work counters and its decoded-chunk budget.");
}

// Synthetic and in-memory sources, and the helpers tests compare with (schema parsing, the
// synthetic values, the sampler's order).
void BindTestingHelpers(py::module_& m) {
  m.def(
      "synthetic",
      [](const std::string& spec, int64_t samples, uint64_t seed, const std::string& lengths) {
        if (samples < 0) {
          throw Error(ErrorCode::kInvalidArgument,
                      fmt::format("synthetic: samples must be >= 0, got {}", samples));
        }
        return OpenSynthetic(ParseSchema(spec), samples, seed,
                             lengths.empty() ? SyntheticLengths{} : ParseSyntheticLengths(lengths));
      },
      py::arg("schema"), py::arg("samples"), py::arg("seed") = 0, py::arg("lengths") = "");
  m.def(
      "synthetic_length",
      [](const std::string& lengths, uint64_t seed, int field, int64_t sample) {
        return SyntheticLength(ParseSyntheticLengths(lengths), seed, field, sample);
      },
      py::arg("lengths"), py::arg("seed"), py::arg("field"), py::arg("sample"));

  m.def(
      "memory",
      [](const std::vector<MemoryFieldTuple>& fields, const py::object& owner) {
        std::vector<MemoryField> memory;
        memory.reserve(fields.size());
        for (const auto& [name, dtype, shape, address, samples] : fields) {
          memory.push_back(MemoryField{FieldSpec{name, DTypeFromName(dtype), shape},
                                       reinterpret_cast<const void*>(address), samples});
        }
        return OpenMemory(std::move(memory), HoldPythonObject(owner));
      },
      py::arg("fields"), py::arg("owner"),
      "Arrays in memory, zero-copy: fields are (name, dtype, per-sample shape, address, "
      "samples); `owner` keeps the memory alive as long as the source lives.");

  m.def("parse_schema", [](const std::string& spec) { return SchemaToList(ParseSchema(spec)); });

  m.def(
      "synthetic_value",
      [](uint64_t seed, int field, int64_t sample, int64_t element, const std::string& dtype) {
        return SyntheticValue(seed, field, sample, element, DTypeFromName(dtype));
      },
      py::arg("seed"), py::arg("field"), py::arg("sample"), py::arg("element"), py::arg("dtype"));

  m.def(
      "epoch_order",
      [](int64_t num_samples, int64_t batch_size, int64_t epoch, uint64_t seed, bool shuffle,
         bool drop_last, int rank, int world_size, int64_t start, int64_t count) {
        Sampler sampler(num_samples, SamplerOptions{.batch_size = batch_size,
                                                    .shuffle = shuffle,
                                                    .seed = seed,
                                                    .drop_last = drop_last,
                                                    .rank = rank,
                                                    .world_size = world_size});
        if (start == 0 && count < 0) {
          const std::vector<int64_t> order = sampler.EpochOrder(epoch);
          return py::array_t<int64_t>(static_cast<py::ssize_t>(order.size()), order.data());
        }
        // A slice, computed position by position: any part of any epoch without the rest.
        const int64_t size = sampler.shard_size();
        if (start < 0 || start > size) {
          throw Error(ErrorCode::kInvalidArgument,
                      fmt::format("start {} is outside this rank's {} samples", start, size));
        }
        const int64_t n = count < 0 ? size - start : std::min(count, size - start);
        py::array_t<int64_t> out(static_cast<py::ssize_t>(n));
        int64_t* data = out.mutable_data();
        for (int64_t i = 0; i < n; ++i) data[i] = sampler.SampleAt(epoch, start + i);
        return out;
      },
      py::arg("num_samples"), py::arg("batch_size"), py::arg("epoch"), py::arg("seed") = 0,
      py::arg("shuffle") = true, py::arg("drop_last") = false, py::arg("rank") = 0,
      py::arg("world_size") = 1, py::arg("start") = 0, py::arg("count") = -1,
      "This rank's samples of `epoch` in delivery order, as the C++ sampler plans them: all of "
      "them, or `count` from position `start` (-1: to the end).");
}

}  // namespace

}  // namespace gpufeed::python
