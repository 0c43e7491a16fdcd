// _Loader: gpufeed.Loader's native half (see py_loader.h for its locking and the GIL).
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "py_loader.h"
#ifdef GPUFEED_PYTHON_CACHE
#include <nlohmann/json.hpp>

#include "gpufeed/cache.h"
#endif

namespace gpufeed::python {

void BindLoader(py::module_& m) {
  py::class_<PyLoader>(m, "_Loader", "The C++ loader; use gpufeed.Loader.")
      .def(py::init([](std::shared_ptr<Source> source, int64_t batch_size, bool shuffle,
                       uint64_t seed, bool drop_last, int rank, int world_size, int workers,
                       int prefetch, int max_outstanding, const std::string& device,
                       const std::vector<std::string>& transforms, int64_t shuffle_block,
                       int shuffle_window, int64_t start_epoch, bool autotune, int max_workers,
                       int max_prefetch, const std::string& cache, bool preload,
                       const std::string& shm_dir) {
             LoaderOptions options;
             options.batch_size = batch_size;
             options.shuffle = shuffle;
             options.seed = seed;
             options.drop_last = drop_last;
             options.rank = rank;
             options.world_size = world_size;
             options.workers = workers;
             options.prefetch = prefetch;
             options.max_outstanding = max_outstanding;
             options.shuffle_block = shuffle_block;
             options.shuffle_window = shuffle_window;
             options.start_epoch = start_epoch;
             options.autotune = autotune;
             options.max_workers = max_workers;
             options.max_prefetch = max_prefetch;
             for (const auto& spec : transforms) options.transforms.push_back(ParseTransform(spec));
             options.device = OpenDevice(device);
             std::string cache_json;
             if (cache != "none") {
#ifdef GPUFEED_PYTHON_CACHE
               CacheOptions cache_options;
               cache_options.tier = cache;
               cache_options.preload = preload;
               cache_options.shm_dir = shm_dir;
               cache_options.device = options.device;
               cache_options.transforms = options.transforms;
               CacheInfo info;
               {
                 // A preload, shm build or upload reads the whole source: let Python run.
                 py::gil_scoped_release release;
                 source = OpenCached(std::move(source), cache_options, &info);
               }
               options.transforms = info.loader_transforms;
               cache_json = nlohmann::json{{"tier", info.tier},
                                           {"reason", info.reason},
                                           {"path", info.path},
                                           {"key", info.key},
                                           {"bytes", info.bytes},
                                           {"built", info.built},
                                           {"open_seconds", info.open_seconds}}
                                .dump();
#else
               throw Error(ErrorCode::kUnsupported, "this build of gpufeed has no cache part");
#endif
             }
             auto loader = std::make_unique<PyLoader>(std::move(source), std::move(options));
             if (!cache_json.empty()) loader->cache_json = std::move(cache_json);
             return loader;
           }),
           py::arg("source"), py::arg("batch_size"), py::arg("shuffle") = true, py::arg("seed") = 0,
           py::arg("drop_last") = false, py::arg("rank") = -1, py::arg("world_size") = -1,
           py::arg("workers") = 0, py::arg("prefetch") = 0, py::arg("max_outstanding") = 2,
           py::arg("device") = "auto", py::arg("transforms") = std::vector<std::string>{},
           py::arg("shuffle_block") = 0, py::arg("shuffle_window") = 4, py::arg("start_epoch") = 0,
           py::arg("autotune") = false, py::arg("max_workers") = 0, py::arg("max_prefetch") = 0,
           py::arg("cache") = "none", py::arg("preload") = false,
           py::arg("shm_dir") = "/dev/shm")
      .def_property_readonly("cache_json", [](const PyLoader& l) { return l.cache_json; })
      .def("next", &PyLoader::Next,
           "The next BatchHandle of the current epoch, or None once it is over (the call after "
           "that starts the next epoch).")
      .def("drain", &PyLoader::Drain, py::arg("batches"),
           "Takes `batches` batches in C++ and drops them: (seconds, batches taken).")
      .def("set_epoch",
           [](PyLoader& l, int64_t epoch) { l.Consumer([&](Loader& x) { x.SetEpoch(epoch); }); })
      .def("state_json",
           [](PyLoader& l) { return l.Consumer([](Loader& x) { return x.State().ToJson(); }); })
      .def("restore_json",
           [](PyLoader& l, const std::string& json) {
             const LoaderState state = LoaderState::FromJson(json);
             l.Consumer([&](Loader& x) { x.Restore(state); });
           })
      .def("set_parallelism",
           [](PyLoader& l, int workers, int prefetch) {
             l.Consumer([&](Loader& x) { x.SetParallelism(workers, prefetch); });
           })
      .def_property_readonly(
          "workers", [](PyLoader& l) { return l.Any([](Loader& x) { return x.workers(); }); })
      .def_property_readonly(
          "prefetch", [](PyLoader& l) { return l.Any([](Loader& x) { return x.prefetch(); }); })
      .def("stats_json",
           [](PyLoader& l) { return l.Any([](Loader& x) { return x.stats().ToJson(); }); })
      .def_property_readonly(
          "epoch", [](PyLoader& l) { return l.Consumer([](Loader& x) { return x.epoch(); }); })
      .def_property_readonly(
          "batches_per_epoch",
          [](PyLoader& l) { return l.Any([](Loader& x) { return x.batches_per_epoch(); }); })
      .def_property_readonly(
          "samples_per_epoch",
          [](PyLoader& l) { return l.Any([](Loader& x) { return x.samples_per_epoch(); }); })
      .def_property_readonly(
          "held_batches",
          [](PyLoader& l) { return l.Any([](Loader& x) { return x.held_batches(); }); })
      .def_property_readonly(
          "device", [](PyLoader& l) { return l.Any([](Loader& x) { return x.device().name(); }); })
      .def_property_readonly(
          "device_id",
          [](PyLoader& l) {
            const DeviceId id = l.Any([](Loader& x) { return x.device().id(); });
            return std::pair{std::string(DeviceTypeName(id.type)), id.ordinal};
          },
          "(type, ordinal) of the batches' device: ('cpu', 0), ('cuda', N).")
      .def_property_readonly(
          "source",
          [](PyLoader& l) { return l.Any([](Loader& x) { return x.source().Describe(); }); })
      .def_property_readonly(
          "schema",
          [](PyLoader& l) {
            return l.Any([](Loader& x) {
              std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out;
              for (const auto& f : x.schema().fields) {
                out.emplace_back(f.name, std::string(DTypeName(f.dtype)), f.shape);
              }
              return out;
            });
          })
      .def("close", &PyLoader::Close, "Stops and joins the workers; the loader is unusable after.")
      .def_property_readonly("closed", &PyLoader::closed);
}

}  // namespace gpufeed::python
