// _Loader: gpufeed.Loader's native half (see py_loader.h for its locking and the GIL).
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/host_memory_pool.h"
#include "device/pinned_host_pool.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/open_loader.h"
#include "interruptible.h"
#include "py_loader.h"

namespace gpufeed::python {
namespace {

// _LoaderOptions binds the recipe OpenLoader assembles a loader from (gpufeed/open_loader.h).
using CachedLoaderOptions = LoaderRecipe;

// A LoaderOptions member as a read-write attribute of _LoaderOptions.
template <typename T>
void LoaderField(py::class_<CachedLoaderOptions>& c, const char* name, T LoaderOptions::*member) {
  c.def_property(
      name, [member](const CachedLoaderOptions& o) { return o.loader.*member; },
      [member](CachedLoaderOptions& o, T value) { o.loader.*member = value; });
}

// The attributes of _LoaderOptions that set its LoaderOptions (CachedLoaderOptions::loader).
void BindLoaderFields(py::class_<CachedLoaderOptions>& c) {
  LoaderField(c, "batch_size", &LoaderOptions::batch_size);
  LoaderField(c, "shuffle", &LoaderOptions::shuffle);
  LoaderField(c, "seed", &LoaderOptions::seed);
  LoaderField(c, "drop_last", &LoaderOptions::drop_last);
  LoaderField(c, "pad", &LoaderOptions::pad);
  LoaderField(c, "held_budget_bytes", &LoaderOptions::held_budget_bytes);
  LoaderField(c, "rank", &LoaderOptions::rank);
  LoaderField(c, "world_size", &LoaderOptions::world_size);
  LoaderField(c, "shuffle_block", &LoaderOptions::shuffle_block);
  LoaderField(c, "shuffle_window", &LoaderOptions::shuffle_window);
  LoaderField(c, "workers", &LoaderOptions::workers);
  LoaderField(c, "prefetch", &LoaderOptions::prefetch);
  LoaderField(c, "max_outstanding", &LoaderOptions::max_outstanding);
  // Autotuning is the doctor's remedies as a whole: the autotuner and the background copy.
  c.def_property(
      "autotune", [](const CachedLoaderOptions& o) { return o.loader.autotune; },
      [](CachedLoaderOptions& o, bool on) {
        o.loader.autotune = on;
        o.remedies = on;
      });
  LoaderField(c, "max_workers", &LoaderOptions::max_workers);
  LoaderField(c, "max_prefetch", &LoaderOptions::max_prefetch);
  LoaderField(c, "start_epoch", &LoaderOptions::start_epoch);
  LoaderField(c, "trace", &LoaderOptions::trace);
  LoaderField(c, "trace_batches", &LoaderOptions::trace_batches);
  LoaderField(c, "pack", &LoaderOptions::pack);
  LoaderField(c, "pack_window", &LoaderOptions::pack_window);
  c.def_property(
      "groups",
      [](const CachedLoaderOptions& o) {
        return std::const_pointer_cast<GroupTable>(o.loader.groups);
      },
      [](CachedLoaderOptions& o, std::shared_ptr<GroupTable> t) {
        o.loader.groups = std::move(t);
      });
}

// The attributes of _LoaderOptions that set its CacheOptions (CachedLoaderOptions::cache).
void BindCacheFields(py::class_<CachedLoaderOptions>& c) {
  c.def_property(
      "cache",
      [](const CachedLoaderOptions& o) { return std::string(CacheTierName(o.cache.tier)); },
      [](CachedLoaderOptions& o, const std::string& tier) { o.cache.tier = ParseCacheTier(tier); });
  c.def_property(
      "preload", [](const CachedLoaderOptions& o) { return o.cache.preload; },
      [](CachedLoaderOptions& o, bool preload) { o.cache.preload = preload; });
  c.def_property(
      "shm_dir", [](const CachedLoaderOptions& o) { return o.cache.shm_dir; },
      [](CachedLoaderOptions& o, const std::string& dir) { o.cache.shm_dir = dir; });
  c.def_property(
      "shm_group", [](const CachedLoaderOptions& o) { return o.cache.shm_group; },
      [](CachedLoaderOptions& o, const std::string& group) { o.cache.shm_group = group; });
  c.def_property(
      "background", [](const CachedLoaderOptions& o) { return o.cache.background; },
      [](CachedLoaderOptions& o, bool background) { o.cache.background = background; });
  c.def_property(
      "detach", [](const CachedLoaderOptions& o) { return o.cache.detach; },
      [](CachedLoaderOptions& o, bool detach) { o.cache.detach = detach; });
  c.def_property(
      "source_path", [](const CachedLoaderOptions& o) { return o.cache.source_path; },
      [](CachedLoaderOptions& o, const std::string& path) { o.cache.source_path = path; });
  c.def_property(
      "source_fields", [](const CachedLoaderOptions& o) { return o.cache.source_fields; },
      [](CachedLoaderOptions& o, const std::vector<std::string>& fields) {
        o.cache.source_fields = fields;
      });
  c.def_property(
      "cli_binary", [](const CachedLoaderOptions& o) { return o.cache.cli_binary; },
      [](CachedLoaderOptions& o, const std::string& path) { o.cache.cli_binary = path; });
}

// The attributes of _LoaderOptions that say how a variable-length field is batched
// (LoaderRecipe::pack, ::pad), each a dict of the options' fields.
void BindVarlenFields(py::class_<CachedLoaderOptions>& c) {
  c.def_property(
      "pack_sequences", [](const CachedLoaderOptions& o) { return o.pack.has_value(); },
      [](CachedLoaderOptions& o, const py::dict& d) {
        PackOptions pack;
        pack.field = d["field"].cast<std::string>();
        pack.length = d["length"].cast<int64_t>();
        pack.split = d["split"].cast<bool>();
        pack.eos = d["eos"].cast<std::optional<double>>();
        pack.pad_value = d["pad_value"].cast<double>();
        pack.window = d["window"].cast<int64_t>();
        pack.ids = d["ids"].cast<bool>();
        o.pack = pack;
      });
  c.def_property(
      "pad_sequences", [](const CachedLoaderOptions& o) { return o.pad.has_value(); },
      [](CachedLoaderOptions& o, const py::dict& d) {
        o.pad = PadOptions{.field = d["field"].cast<std::string>(),
                           .max_length = d["max_length"].cast<int64_t>(),
                           .pad_to_multiple_of = d["pad_to_multiple_of"].cast<int64_t>(),
                           .pad_value = d["pad_value"].cast<double>(),
                           .truncate_left = d["truncate_left"].cast<bool>()};
      });
}

// The options object gpufeed.Loader fills: every attribute starts at the C++ default (the
// `// Default:` lines of LoaderOptions, CacheOptions and LoaderRecipe), and Python
// sets only what its caller gave, so no default is written twice.
void BindLoaderOptions(py::module_& m) {
  py::class_<CachedLoaderOptions> c(m, "_LoaderOptions",
                                    "Options of _Loader; unset attributes keep the C++ defaults.");
  c.def(py::init([](const py::kwargs& given) {
    auto options = std::make_unique<CachedLoaderOptions>();
    py::object self = py::cast(options.get(), py::return_value_policy::reference);
    for (const auto& [name, value] : given) {
      const std::string key = py::str(name);
      if (!py::hasattr(self, key.c_str())) {
        throw Error(ErrorCode::kInvalidArgument, fmt::format("unknown loader option '{}'", key));
      }
      self.attr(key.c_str()) = value;
    }
    return options;
  }));
  BindLoaderFields(c);
  BindVarlenFields(c);
  // The loader's and the cache's both: the recipe holds them once.
  c.def_readwrite("device", &CachedLoaderOptions::device);
  c.def_readwrite("transforms", &CachedLoaderOptions::transforms);
  BindCacheFields(c);
}

// cache_tiers: the names _LoaderOptions' "cache" takes, from the one list of tiers
// (gpufeed/source.h): Python's checks and messages use them.
void BindCacheTiers(py::module_& m) {
  py::tuple tiers(kCacheTiers.size());
  for (size_t i = 0; i < kCacheTiers.size(); ++i) tiers[i] = std::string(kCacheTiers[i].name);
  m.attr("cache_tiers") = tiers;
}

std::string CacheJson(const CacheInfo& info) {
  nlohmann::json json{{"tier", CacheTierName(info.tier)},
                      {"reason", info.reason},
                      {"path", info.path},
                      {"key", info.key},
                      {"bytes", info.bytes},
                      {"built", info.built},
                      {"open_seconds", info.open_seconds},
                      {"measured",
                       {{"source_bytes_per_s", info.measured.source_bytes_per_s},
                        {"ram_bytes_per_s", info.measured.ram_bytes_per_s},
                        {"shm_bytes_per_s", info.measured.shm_bytes_per_s}}}};
  // Only the device tier says how its copy is held (shared through CUDA IPC, or why not).
  if (!info.device_share.empty()) json["device_share"] = info.device_share;
  return json.dump();
}

// The copy of the data set the loader's cache makes: what was chosen, and how far it is.
void BindLoaderCache(py::class_<PyLoader>& c) {
  c.def_property_readonly("cache_json", [](const PyLoader& l) { return l.cache_json; })
      .def(
          "cache_progress",
          [](const PyLoader& l) -> py::object {
            if (!l.cache_progress) return py::none();
            const CacheProgress::Snapshot now = l.cache_progress->Get();
            py::dict d;
            d["serving"] = std::string(CacheTierName(now.tier));
            d["built_fraction"] = now.built_fraction;
            d["done"] = now.done;
            d["built"] = now.built;
            d["reason"] = now.reason;
            d["error"] = now.error;
            return d;
          },
          "The copy being made in the background, now: None when none is.")
      .def(
          "wait_for_cache",
          [](const PyLoader& l, double timeout_s) {
            if (!l.cache_progress) return true;
            py::gil_scoped_release release;
            return l.cache_progress->WaitUntilDone(timeout_s);
          },
          py::arg("timeout_s"));
}

// The loader's read-only figures: epoch, sizes, held batches, parallelism, device, source,
// schema.
void BindLoaderProperties(py::class_<PyLoader>& c) {
  c.def_property_readonly(
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
          "workers", [](PyLoader& l) { return l.Any([](Loader& x) { return x.workers(); }); })
      .def_property_readonly(
          "prefetch", [](PyLoader& l) { return l.Any([](Loader& x) { return x.prefetch(); }); })
      .def_property_readonly(
          "pack_fill", [](PyLoader& l) { return l.Any([](Loader& x) { return x.pack_fill(); }); })
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
      .def_property_readonly("schema", [](PyLoader& l) {
        return l.Any([](Loader& x) {
          std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out;
          for (const auto& f : x.schema().fields) {
            out.emplace_back(f.name, std::string(DTypeName(f.dtype)), f.shape);
          }
          return out;
        });
      });
}

// The process's pools of batch memory, which outlive its loaders.
void BindReleaseMemory(py::module_& m) {
  m.def(
      "release_memory",
      [] {
        py::dict freed;
        freed["host_bytes"] = HostMemoryPool::Instance().Trim();
        freed["pinned_bytes"] = cuda::PinnedHostPool::Instance().Trim();
        return freed;
      },
      "Frees the batch memory and unpins the staging buffers the process keeps for its next "
      "loaders; returns the bytes of each. Open loaders keep theirs.");
}

}  // namespace

void BindLoader(py::module_& m) {
  BindLoaderOptions(m);
  BindCacheTiers(m);
  py::class_<PyLoader> c(m, "_Loader", "The C++ loader; use gpufeed.Loader.");
  c.def(py::init([](std::shared_ptr<Source> source, const CachedLoaderOptions& options) {
          // Opening a device, a preload, an shm build or upload and the loader's start may
          // each take a while: other Python threads run meanwhile, and Ctrl-C cancels it.
          LoaderRecipe recipe = options;
          recipe.source = std::move(source);
          OpenedLoader opened = RunInterruptible([&] { return OpenLoader(std::move(recipe)); });
          auto loader = std::make_unique<PyLoader>(std::move(opened.loader));
          if (options.cache.tier != CacheTier::kNone) {
            loader->cache_json = CacheJson(opened.cache);  // else "caching is off"
            loader->cache_progress = opened.cache.progress;
          }
          return loader;
        }),
        py::arg("source"), py::arg("options"))
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
      .def("write_trace",
           [](PyLoader& l, const std::string& path) {
             l.Any([&](Loader& x) { x.WriteTrace(path); });
           })
      .def("stats_json",
           [](PyLoader& l) { return l.Any([](Loader& x) { return x.stats().ToJson(); }); })
      .def("close", &PyLoader::Close, "Stops and joins the workers; the loader is unusable after.")
      .def_property_readonly("closed", &PyLoader::closed);
  BindLoaderCache(c);
  BindLoaderProperties(c);
  BindReleaseMemory(m);
}

}  // namespace gpufeed::python
