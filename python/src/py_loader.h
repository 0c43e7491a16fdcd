// PyLoader: the C++ Loader as the Python package holds it. Every call that may block (Next
// waits for workers, SetEpoch and Restore restart them, Close joins them) runs with the GIL
// released, so other Python threads and torch keep running. A consumer mutex serializes the
// calls the C++ loader allows from one thread at a time, and a life lock keeps Close() from
// destroying the loader under a call in flight: misuse from several threads waits, it never
// crashes.
// Thread-safety: every method may be called from any Python thread (with the GIL held).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"

namespace gpufeed::python {

namespace py = pybind11;

class PyLoader {
 public:
  explicit PyLoader(std::unique_ptr<Loader> loader);
  ~PyLoader();

  // The next BatchHandle, or None at the end of the epoch.
  py::object Next();
  // Runs `batches` Next() calls in C++ and drops each batch at once: the loader's own cost
  // per batch, for comparing with the Python iteration. Returns (seconds, batches taken).
  std::pair<double, int64_t> Drain(int64_t batches);
  void Close();
  bool closed();

  // What OpenCached chose for this loader's source, as JSON (tier, reason, path, key, bytes,
  // built, open_seconds); set once by the constructor's caller, read-only after.
  std::string cache_json = R"({"tier": "none", "reason": "caching is off"})";
  // The copy being made in the background (CacheInfo::progress); null when none was.
  // Set once by the constructor's caller, read-only after; the object itself is thread-safe.
  std::shared_ptr<const CacheProgress> cache_progress;

  // Runs `fn(loader)` for a call the C++ loader allows from one thread at a time.
  template <typename Fn>
  auto Consumer(Fn fn) {
    py::gil_scoped_release release;
    std::shared_lock life(life_mu_);
    std::lock_guard consumer(consumer_mu_);
    return fn(Get());
  }

  // Runs `fn(loader)` for a thread-safe call. Releases the GIL too: Close() may need it (a
  // memory source's owner) while it holds the life lock.
  template <typename Fn>
  auto Any(Fn fn) {
    py::gil_scoped_release release;
    std::shared_lock life(life_mu_);
    return fn(Get());
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

}  // namespace gpufeed::python
