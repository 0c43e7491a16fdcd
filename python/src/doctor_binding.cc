// _diagnose: the doctor's verdict on a running loader (and the monitor, when one runs), for
// gpufeed.Loader.diagnose(). Built where the doctor part is.
#include "bindings.h"
#include "gpufeed/doctor.h"
#include "py_loader.h"

namespace gpufeed::python {

void BindDoctor(py::module_& m) {
  m.def(
      "diagnose",
      [](PyLoader& loader, const Monitor* monitor, size_t window) {
        const Diagnosis diagnosis =
            loader.Any([&](Loader& l) { return Diagnose(CollectDoctorInput(l, monitor, window)); });
        return std::make_pair(diagnosis.ToJson(), diagnosis.ToText());
      },
      py::arg("loader"), py::arg("monitor") = nullptr, py::arg("window") = 64,
      "(JSON, text) of the doctor's diagnosis over the loader's last `window` batches.");
}

}  // namespace gpufeed::python
