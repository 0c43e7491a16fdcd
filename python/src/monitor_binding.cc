// _Monitor: the C++ Monitor (GPU through NVML, host through /proc and cgroup v2) for
// gpufeed.Monitor. Snapshots cross as JSON text (the monitor's own JSON lines format), so
// Python sees the same keys, units and nulls as the JSON lines log. Calls that may block
// (start, stop, a sample) release the GIL.
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/monitor.h"
#include "monitor/snapshot_json.h"

namespace gpufeed::python {
namespace {

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

py::object SnapshotJson(const std::optional<MonitorSnapshot>& snapshot) {
  if (!snapshot) return py::none();
  return py::str(SnapshotToJson(*snapshot).dump());
}

}  // namespace

void BindMonitor(py::module_& m) {
  py::class_<Monitor>(m, "_Monitor", "The C++ monitor; use gpufeed.Monitor.")
      .def(py::init([](double interval, int pid, const std::string& jsonl,
                       const std::string& prometheus, bool live, double low_utilization,
                       double low_utilization_seconds, const std::string& nvml_library) {
             MonitorOptions options;
             options.interval = Millis(interval);
             options.pid = pid;
             options.jsonl_path = jsonl;
             options.prometheus_address = prometheus;
             options.live_line = live ? stderr : nullptr;
             options.low_utilization_ratio = low_utilization;
             options.low_utilization_duration = Millis(low_utilization_seconds);
             options.nvml_library = nvml_library;
             py::gil_scoped_release release;
             return std::make_unique<Monitor>(std::move(options));
           }),
           py::arg("interval") = 1.0, py::arg("pid") = 0, py::arg("jsonl") = "",
           py::arg("prometheus") = "", py::arg("live") = false, py::arg("low_utilization") = 0.30,
           py::arg("low_utilization_seconds") = 10.0, py::arg("nvml_library") = "")
      .def("start", &Monitor::Start, py::call_guard<py::gil_scoped_release>())
      .def("stop", &Monitor::Stop, py::call_guard<py::gil_scoped_release>())
      .def("sample_now_json",
           [](Monitor& monitor) {
             MonitorSnapshot snapshot;
             {
               py::gil_scoped_release release;
               snapshot = monitor.SampleNow();
             }
             return SnapshotJson(snapshot);
           })
      .def("latest_json", [](const Monitor& monitor) { return SnapshotJson(monitor.Latest()); })
      .def("latest_line",
           [](const Monitor& monitor) -> py::object {
             const auto latest = monitor.Latest();
             if (!latest) return py::none();
             return py::str(FormatStatusLine(*latest));
           })
      .def("history_json",
           [](const Monitor& monitor) {
             py::list out;
             for (const auto& snapshot : monitor.History()) out.append(SnapshotJson(snapshot));
             return out;
           })
      .def("warnings", &Monitor::Warnings)
      .def("summary_text", [](const Monitor& monitor) { return monitor.Summary().ToText(); })
      .def("summary",
           [](const Monitor& monitor) {
             const MonitorSummary summary = monitor.Summary();
             py::dict metrics;
             for (const auto& metric : summary.metrics) {
               py::dict d;
               d["unit"] = metric.unit;
               d["count"] = metric.count;
               d["mean"] = metric.mean;
               d["p5"] = metric.p5;
               d["p95"] = metric.p95;
               metrics[py::str(metric.name)] = d;
             }
             py::dict out;
             out["duration_seconds"] = summary.duration_seconds;
             out["samples"] = summary.samples;
             out["metrics"] = metrics;
             out["warnings"] = summary.warnings;
             return out;
           })
      .def_property_readonly("nvml_status", &Monitor::nvml_status)
      .def_property_readonly("prometheus_port", &Monitor::prometheus_port);
}

}  // namespace gpufeed::python
