// _GroupTable: grouped data for gpufeed.Loader(group=..., group_offsets=..., pack=True): made
// once from a file (read_groups) or from NumPy arrays (group_table), then read-only; and the
// group parts of a delivered batch.
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "batch_handle.h"
#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/groups.h"

namespace gpufeed::python {
namespace {

using Table = std::shared_ptr<const GroupTable>;
// (name, dtype, per-group shape, address, rows): a per-group field in memory.
using FieldTuple = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, int64_t>;

py::array_t<int64_t> ToArray(const std::vector<int64_t>& v) {
  return py::array_t<int64_t>(static_cast<py::ssize_t>(v.size()), v.data());
}

// The table itself: sizes and per-group fields, read-only.
void BindGroupTable(py::module_& m) {
  py::class_<GroupTable, std::shared_ptr<GroupTable>>(
      m, "_GroupTable", "The groups of a data set (gpufeed/groups.h); read-only.")
      .def_property_readonly("num_groups", &GroupTable::num_groups)
      .def_property_readonly("num_rows", &GroupTable::num_rows)
      .def_property_readonly("name", &GroupTable::name)
      .def("sizes",
           [](const GroupTable& t) {
             std::vector<int64_t> sizes(static_cast<size_t>(t.num_groups()));
             for (int64_t g = 0; g < t.num_groups(); ++g) {
               sizes[static_cast<size_t>(g)] = t.GroupSize(g);
             }
             return ToArray(sizes);
           })
      .def(
          "fields",
          [](const GroupTable& t) {
            py::list out;
            for (const GroupTable::Field& f : t.fields()) {
              out.append(py::make_tuple(
                  f.spec.name, std::string(DTypeName(f.spec.dtype)),
                  py::tuple(py::cast(f.spec.shape)),
                  py::bytes(reinterpret_cast<const char*>(f.data.data()), f.data.size())));
            }
            return out;
          },
          "[(name, dtype, per-group shape, bytes)] of the per-group fields.");
}

// The two ways a table is made: read from a file, or from arrays Python holds.
void BindGroupTableMakers(py::module_& m) {
  m.def(
      "read_groups",
      [](const std::string& path, const std::string& id_field, const std::string& offsets,
         const std::vector<std::string>& fields, int64_t rows) {
        py::gil_scoped_release release;
        return std::const_pointer_cast<GroupTable>(
            ReadGroups(path, {.id_field = id_field, .offsets = offsets, .fields = fields}, rows));
      },
      py::arg("path"), py::arg("id_field"), py::arg("offsets"), py::arg("fields"), py::arg("rows"),
      "The groups of the data set at `path` (an HDF5 file or a NumPy folder).");

  m.def(
      "group_table",
      [](const std::string& kind, const py::array_t<int64_t, py::array::c_style>& values,
         int64_t rows, const std::string& name, const std::vector<FieldTuple>& fields,
         std::optional<int64_t> groups) {
        const std::span<const int64_t> span(values.data(), static_cast<size_t>(values.size()));
        std::unique_ptr<GroupTable> table =
            GroupTable::From(ParseGroupKind(kind), span, rows, name, groups.value_or(-1));
        for (const auto& [field, dtype, shape, address, n] : fields) {
          const auto parsed = ParseDType(dtype);
          if (!parsed) {
            throw Error(ErrorCode::kUnsupported,
                        fmt::format("per-group field '{}' has dtype {}, which gpufeed does not "
                                    "read",
                                    field, dtype));
          }
          table->AddField(FieldSpec{field, *parsed, shape}, reinterpret_cast<const void*>(address),
                          n, "'" + field + "'");
        }
        return std::shared_ptr<GroupTable>(std::move(table));
      },
      py::arg("kind"), py::arg("values"), py::arg("rows"), py::arg("name"), py::arg("fields"),
      py::arg("groups") = py::none(),
      "A group table from offsets (kind='offsets') or per-row ids (kind='ids'), with per-group "
      "fields (name, dtype, shape, address, rows) copied in.");
}

// The group parts of a delivered batch.
void BindBatchGroups(py::module_& m) {
  m.def(
      "batch_groups",
      [](const BatchHandle& h) {
        const auto parts = h.batch()->groups();
        const auto n = static_cast<py::ssize_t>(parts.size());
        py::array_t<int64_t> ids(n), begin(n), end(n), offset(n);
        py::array_t<bool> complete(n);
        for (py::ssize_t i = 0; i < n; ++i) {
          const BatchGroup& p = parts[static_cast<size_t>(i)];
          ids.mutable_at(i) = p.id;
          begin.mutable_at(i) = p.begin;
          end.mutable_at(i) = p.end;
          offset.mutable_at(i) = p.offset;
          complete.mutable_at(i) = p.complete;
        }
        return py::make_tuple(ids, begin, end, offset, complete);
      },
      py::arg("handle"), "(id, begin, end, offset, complete) arrays of the batch's group parts.");
}

}  // namespace

void BindGroups(py::module_& m) {
  BindGroupTable(m);
  BindGroupTableMakers(m);
  BindBatchGroups(m);
}

}  // namespace gpufeed::python
