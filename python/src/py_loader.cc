#include "py_loader.h"

#include <chrono>

#include "batch_handle.h"

namespace gpufeed::python {

PyLoader::PyLoader(std::unique_ptr<Loader> loader) : loader_(std::move(loader)) {}

PyLoader::~PyLoader() {
  // The workers never take the GIL, so joining them while holding it cannot deadlock.
  loader_.reset();
}

py::object PyLoader::Next() {
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

std::pair<double, int64_t> PyLoader::Drain(int64_t batches) {
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

void PyLoader::Close() {
  py::gil_scoped_release release;
  std::unique_lock life(life_mu_);
  loader_.reset();
}

bool PyLoader::closed() {
  py::gil_scoped_release release;
  std::shared_lock life(life_mu_);
  return loader_ == nullptr;
}

}  // namespace gpufeed::python
