// Remote data from Python: the process's remote file system options, its stats, and its
// manifest, which torch.distributed broadcasts from rank 0 so other ranks list nothing.
// Calls that may send requests release the GIL.
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/remote_stats.h"
#if GPUFEED_WITH_REMOTE
#include "gpufeed/remote.h"
#endif

namespace gpufeed::python {
namespace {

#if GPUFEED_WITH_REMOTE

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

// The process's figures, its remote file system created if it was not yet (so max_requests
// shows the cap in use).
RemoteStats Stats() { return DefaultRemoteFileSystem()->stats(); }

void BindRemoteCalls(py::module_& m) {
  m.def(
      "set_remote_options",
      [](const py::kwargs& kw) { SetDefaultRemoteOptions(OptionsFromKwargs(kw)); },
      "Sets how the process reads s3:// and http(s):// data (files opened later use it): "
      "max_requests (in flight per host; default $GPUFEED_MAX_REQUESTS, else 32), "
      "connect_timeout_s (10), read_timeout_s (30: a transfer idle this long is retried), "
      "max_attempts (8 per request), retry_budget_s (60 per request), anonymous (False: "
      "unsigned requests for public buckets), endpoint, region, profile (default: as boto3 "
      "finds them: AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_PROFILE, ~/.aws/config).");
  m.def(
      "remote_manifest", [] { return ToTuples(DefaultRemoteFileSystem()->Manifest(), ""); },
      "Every object listed or opened so far, as (uri, size, etag).");
  m.def(
      "list_remote",
      [](const std::string& prefix) {
        py::gil_scoped_release release;
        std::shared_ptr<RemoteFileSystem> fs = DefaultRemoteFileSystem();
        if (!prefix.ends_with('/') && fs->Type(prefix) == PathType::kFile) {
          fs->Open(prefix);  // one object: its size and ETag, kept in the manifest
          std::vector<ObjectTuple> one;
          for (const ObjectTuple& t : ToTuples(fs->Manifest(), prefix)) {
            if (std::get<0>(t) == prefix) one.push_back(t);
          }
          return one;
        }
        fs->List(prefix);  // one recursive listing, kept as the manifest
        const std::string folder = prefix.ends_with('/') ? prefix : prefix + "/";
        return ToTuples(fs->Manifest(), folder);
      },
      py::arg("uri_prefix"),
      "Lists every object under a prefix (or the one object a URI names) through the process's "
      "remote file system (which "
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

#else

RemoteStats Stats() { return ProcessRemoteStats(); }

// The same names, each refused: this build has no remote support.
void BindRemoteCalls(py::module_& m) {
  for (const char* name : {"set_remote_options", "remote_manifest", "list_remote",
                           "add_remote_manifest"}) {
    m.def(
        name,
        [name](const py::args&, const py::kwargs&) {
          throw Error(ErrorCode::kUnsupported,
                      std::string(name) +
                          ": this build of gpufeed has no remote support (it was built with "
                          "-DGPUFEED_WITH_REMOTE=OFF)");
        },
        "Refused: this build of gpufeed has no remote support (GPUFEED_WITH_REMOTE=OFF).");
  }
}

#endif

}  // namespace

void BindRemote(py::module_& m) {
  BindRemoteCalls(m);
  m.def(
      "remote_stats",
      [] {
        const RemoteStats s = Stats();
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
  m.def("is_remote_uri", &IsRemoteUri, py::arg("path"),
        "Whether `path` is read over the network: an s3://, http:// or https:// URI.");
  m.def(
      "use_disk_tier",
      [](const std::string& path, const std::string& dir, uint64_t budget_bytes) {
        CacheOptions options;
        options.disk_dir = dir;
        options.disk_budget_bytes = budget_bytes;
        UseDiskTier(path, options);
      },
      py::arg("path"), py::arg("dir") = std::string(), py::arg("budget_bytes") = 0,
      "The disk tier for the data at `path` (gpufeed/cache.h, UseDiskTier): from now on, every "
      "s3:// and http(s):// source the process opens reads through the node-local disk cache "
      "in `dir` (default ~/.cache/gpufeed/remote) within budget_bytes (0: half the free space "
      "there). Raises InvalidArgument for a local path.");
}

}  // namespace gpufeed::python
