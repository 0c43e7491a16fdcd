// One Python exception class per gpufeed::ErrorCode. Each subclasses gpufeed.Error and the
// builtin a Python user would catch for that failure (a missing file is a FileNotFoundError),
// so `except ValueError` and `except gpufeed.Error` both work. The message is the C++ one.
#include <Python.h>

#include <array>

#include "bindings.h"
#include "gpufeed/error.h"

namespace gpufeed::python {
namespace {

struct ErrorClass {
  ErrorCode code;
  const char* name;   // attribute of the module and of the `gpufeed` package
  PyObject* builtin;  // the second base, next to gpufeed.Error
  const char* doc;
};

// Built once at import; the module (and so these classes) lives until the interpreter ends.
PyObject* g_base = nullptr;
std::array<PyObject*, 9> g_classes = {};

PyObject* ClassFor(ErrorCode code) {
  const auto i = static_cast<size_t>(code);
  return i < g_classes.size() && g_classes[i] != nullptr ? g_classes[i] : g_base;
}

}  // namespace

void BindErrors(py::module_& m) {
  // LookupError beside FileNotFoundError: "not found" also names a missing field or dataset.
  const ErrorClass classes[] = {
      {ErrorCode::kInvalidArgument, "InvalidArgument", PyExc_ValueError,
       "A bad option or argument: change the call."},
      {ErrorCode::kNotFound, "NotFound", nullptr,
       "A file, field, dataset, device or library that does not exist."},
      {ErrorCode::kCorruptData, "CorruptData", PyExc_ValueError,
       "A file whose content contradicts its format."},
      {ErrorCode::kIo, "IoError", PyExc_OSError, "The OS failed a read or write."},
      {ErrorCode::kDevice, "DeviceError", PyExc_RuntimeError,
       "The GPU driver failed or is missing."},
      {ErrorCode::kCancelled, "Cancelled", PyExc_RuntimeError,
       "The operation was stopped by its owner."},
      {ErrorCode::kUnsupported, "Unsupported", PyExc_NotImplementedError,
       "Valid input that gpufeed cannot handle (a dtype, a filter)."},
      {ErrorCode::kPermissionDenied, "PermissionDenied", PyExc_PermissionError,
       "The store or the OS refused access (HTTP 403)."},
  };
  g_base = PyErr_NewExceptionWithDoc("gpufeed.Error", "Base class of every error gpufeed raises.",
                                     PyExc_Exception, nullptr);
  if (g_base == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(g_base);
  for (const ErrorClass& c : classes) {
    py::tuple bases = c.code == ErrorCode::kNotFound
                          ? py::make_tuple(py::handle(g_base), py::handle(PyExc_FileNotFoundError),
                                           py::handle(PyExc_LookupError))
                          : py::make_tuple(py::handle(g_base), py::handle(c.builtin));
    const std::string qualified = std::string("gpufeed.") + c.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    py::handle(cls).attr("code") = std::string(ErrorCodeName(c.code));
    g_classes[static_cast<size_t>(c.code)] = cls;
    m.attr(c.name) = py::handle(cls);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(ClassFor(e.code()), e.what());
    }
  });
}

}  // namespace gpufeed::python
