// gpufeed._gpufeed: the C++ engine as seen from Python. The public API is the pure-Python
// package `gpufeed`; this module holds only what has to be native.
#include "bindings.h"

PYBIND11_MODULE(_gpufeed, m) {
  m.doc() = "gpufeed's native engine; use the `gpufeed` package instead";
  gpufeed::python::BindErrors(m);
  gpufeed::python::BindSources(m);
  gpufeed::python::BindVarlen(m);
  gpufeed::python::BindBatch(m);
  gpufeed::python::BindGroups(m);
  gpufeed::python::BindLoader(m);
  gpufeed::python::BindMonitor(m);
  gpufeed::python::BindDoctor(m);
  gpufeed::python::BindRemote(m);
}
