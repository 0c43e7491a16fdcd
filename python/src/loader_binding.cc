// _Loader: the C++ Loader for the Python package. Every call that may block (Next waits for
// workers, SetEpoch and Restore restart them, close joins them) runs with the GIL released,
// so other Python threads and torch keep running. A consumer mutex serializes the calls the
// C++ loader allows from one thread at a time, and a life lock keeps close() from destroying
// the loader under a call in flight: misuse from several threads waits, it never crashes.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "batch_handle.h"
#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"

namespace gpufeed::python {
namespace {

// Thread-safety: every method may be called from any Python thread; see the file comment.
class PyLoader {
 public:
  PyLoader(std::shared_ptr<Source> source, LoaderOptions options) {
    py::gil_scoped_release release;
    loader_ = std::make_unique<Loader>(std::move(source), std::move(options));
  }

  ~PyLoader() {
    // The workers never take the GIL, so joining them while holding it cannot deadlock.
    loader_.reset();
  }

  py::object Next() {
    std::unique_ptr<Batch> batch;
    {
      py::gil_scoped_release release;
      std::shared_lock life(life_mu_);
      std::lock_guard consumer(consumer_mu_);
      batch = Get().Next();
    }
    if (!batch) return py::none();
    return py::cast(BatchHandle(std::shared_ptr<const Batch>(std::move(batch))));
  }

  // Runs `batches` Next() calls in C++ and drops each batch at once: the loader's own cost
  // per batch, for comparing with the Python iteration.
  std::pair<double, int64_t> Drain(int64_t batches) {
    py::gil_scoped_release release;
    std::shared_lock life(life_mu_);
    std::lock_guard consumer(consumer_mu_);
    const auto start = std::chrono::steady_clock::now();
    int64_t delivered = 0;
    int64_t empty_epochs = 0;
    while (delivered < batches) {
      if (Get().Next()) {
        ++delivered;
        empty_epochs = 0;
      } else if (++empty_epochs > 1) {
        break;  // an epoch with no batches
      }
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return {elapsed.count(), delivered};
  }

  template <typename Fn>
  auto Consumer(Fn fn) {
    py::gil_scoped_release release;
    std::shared_lock life(life_mu_);
    std::lock_guard consumer(consumer_mu_);
    return fn(Get());
  }

  // Releases the GIL too: close() may need it (a memory source's owner) while it holds the
  // life lock.
  template <typename Fn>
  auto Any(Fn fn) {
    py::gil_scoped_release release;
    std::shared_lock life(life_mu_);
    return fn(Get());
  }

  void Close() {
    py::gil_scoped_release release;
    std::unique_lock life(life_mu_);
    loader_.reset();
  }

  bool closed() {
    py::gil_scoped_release release;
    std::shared_lock life(life_mu_);
    return loader_ == nullptr;
  }

 private:
  Loader& Get() const {
    if (!loader_) throw Error(ErrorCode::kInvalidArgument, "the loader is closed");
    return *loader_;
  }

  std::shared_mutex life_mu_;
  std::mutex consumer_mu_;
  std::unique_ptr<Loader> loader_;
};

}  // namespace

void BindLoader(py::module_& m) {
  py::class_<PyLoader>(m, "_Loader", "The C++ loader; use gpufeed.Loader.")
      .def(py::init([](std::shared_ptr<Source> source, int64_t batch_size, bool shuffle,
                       uint64_t seed, bool drop_last, int rank, int world_size, int workers,
                       int prefetch, int max_outstanding, const std::string& device,
                       const std::vector<std::string>& transforms, int64_t shuffle_block,
                       int shuffle_window, int64_t start_epoch) {
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
             for (const auto& spec : transforms) options.transforms.push_back(ParseTransform(spec));
             options.device = OpenDevice(device);
             return std::make_unique<PyLoader>(std::move(source), std::move(options));
           }),
           py::arg("source"), py::arg("batch_size"), py::arg("shuffle") = true, py::arg("seed") = 0,
           py::arg("drop_last") = false, py::arg("rank") = -1, py::arg("world_size") = -1,
           py::arg("workers") = 0, py::arg("prefetch") = 0, py::arg("max_outstanding") = 2,
           py::arg("device") = "auto", py::arg("transforms") = std::vector<std::string>{},
           py::arg("shuffle_block") = 0, py::arg("shuffle_window") = 4, py::arg("start_epoch") = 0)
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
