// Remote data from Python: the process's remote file system options, its stats, and its
// manifest, which torch.distributed broadcasts from rank 0 so other ranks list nothing.
// Calls that may send requests release the GIL.
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/remote.h"

namespace gpufeed::python {
namespace {

using ObjectTuple = std::tuple<std::string, uint64_t, std::string>;

RemoteOptions OptionsFromKwargs(const py::kwargs& kw) {
  RemoteOptions o;
  for (const auto& [key_obj, value] : kw) {
    const std::string key = py::cast<std::string>(key_obj);
    if (key == "max_requests")
      o.max_requests = py::cast<int>(value);
    else if (key == "connect_timeout_s")
      o.connect_timeout_s = py::cast<double>(value);
    else if (key == "read_timeout_s")
      o.read_timeout_s = py::cast<double>(value);
    else if (key == "max_attempts")
      o.max_attempts = py::cast<int>(value);
    else if (key == "retry_budget_s")
      o.retry_budget_s = py::cast<double>(value);
    else if (key == "anonymous")
      o.anonymous = py::cast<bool>(value);
    else if (key == "endpoint")
      o.endpoint = py::cast<std::string>(value);
    else if (key == "region")
      o.region = py::cast<std::string>(value);
    else if (key == "profile")
      o.profile = py::cast<std::string>(value);
    else {
      throw Error(ErrorCode::kInvalidArgument,
                  "set_remote_options: unknown option '" + key +
                      "' (max_requests, connect_timeout_s, read_timeout_s, max_attempts, "
                      "retry_budget_s, anonymous, endpoint, region, profile)");
    }
  }
  return o;
}

std::vector<ObjectTuple> ToTuples(const std::vector<RemoteObject>& objects,
                                  const std::string& prefix) {
  std::vector<ObjectTuple> out;
  for (const RemoteObject& o : objects) {
    if (o.uri.starts_with(prefix)) out.emplace_back(o.uri, o.size, o.etag);
  }
  return out;
}

}  // namespace

void BindRemote(py::module_& m) {
  m.def(
      "set_remote_options",
      [](const py::kwargs& kw) { SetDefaultRemoteOptions(OptionsFromKwargs(kw)); },
      "Replaces the options of the process's remote file system (files opened later use "
      "them); keys are RemoteOptions' fields.");
  m.def(
      "remote_stats",
      [] {
        const RemoteStats s = DefaultRemoteFileSystem()->stats();
        py::dict d;
        d["requests"] = s.requests;
        d["retries"] = s.retries;
        d["throttled"] = s.throttled;
        d["failed"] = s.failed;
        d["listings"] = s.listings;
        d["bytes"] = s.bytes;
        d["latency_mean_s"] = s.latency_mean_s;
        d["latency_p99_s"] = s.latency_p99_s;
        d["max_in_flight"] = s.max_in_flight;
        d["max_requests"] = s.max_requests;
        return d;
      },
      "What the process's remote file system has done so far.");
  m.def(
      "remote_manifest", [] { return ToTuples(DefaultRemoteFileSystem()->Manifest(), ""); },
      "Every object listed or opened so far, as (uri, size, etag).");
  m.def(
      "list_remote",
      [](const std::string& prefix) {
        py::gil_scoped_release release;
        std::shared_ptr<RemoteFileSystem> fs = DefaultRemoteFileSystem();
        fs->List(prefix);  // one recursive listing, kept as the manifest
        const std::string folder = prefix.ends_with('/') ? prefix : prefix + "/";
        return ToTuples(fs->Manifest(), folder);
      },
      py::arg("uri_prefix"),
      "Lists every object under a prefix through the process's remote file system (which "
      "keeps the listing), as (uri, size, etag).");
  m.def(
      "add_remote_manifest",
      [](const std::string& prefix, const std::vector<ObjectTuple>& objects) {
        std::vector<RemoteObject> list;
        list.reserve(objects.size());
        for (const auto& [uri, size, etag] : objects) list.push_back({uri, size, etag});
        DefaultRemoteFileSystem()->AddManifest(prefix, std::move(list));
      },
      py::arg("prefix"), py::arg("objects"),
      "Adds objects listed elsewhere (rank 0's listing): opens under `prefix` send no HEAD "
      "and listings no request.");
}

}  // namespace gpufeed::python
