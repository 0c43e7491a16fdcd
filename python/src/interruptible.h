// RunInterruptible: runs a long C++ call (opening a loader with its cache build, preload or
// upload; opening an HDF5 file) so that Ctrl-C stops it. The call runs on a thread of its own
// under a CancelScope (gpufeed/cancel.h), with the GIL released; the calling thread waits for
// it 50 ms at a time and, between waits, takes the GIL and runs Python's signal handlers
// (PyErr_CheckSignals). When a handler raises (KeyboardInterrupt, or whatever a handler of the
// user's raises), the call is cancelled, waited for (it cleans up what it made, within a
// second: see the phases in cancel.h) and the handler's exception is raised. The thread is
// always joined before this returns or throws.
//
// Why a thread: signals reach Python only on the main thread, between bytecodes; a C++ call
// that holds the main thread for minutes would leave Ctrl-C unheard until it returned.
//
// Thread-safety: call with the GIL held. Only the main thread hears signals; from another
// Python thread this waits like a plain call. `fn` must not need the GIL to finish, unless it
// takes it itself (the wait and the join run with the GIL released).
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "gpufeed/cancel.h"

namespace gpufeed::python {

namespace py = pybind11;

template <typename Fn>
auto RunInterruptible(Fn&& fn) -> std::invoke_result_t<Fn&> {
  using Result = std::invoke_result_t<Fn&>;
  static_assert(!std::is_void_v<Result> && !std::is_reference_v<Result>,
                "RunInterruptible returns the call's value");
  CancelToken cancel;
  std::optional<Result> result;
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  std::thread worker;
  {
    py::gil_scoped_release release;
    worker = std::thread([&] {
      {
        CancelScope scope(&cancel);
        try {
          result.emplace(fn());
        } catch (...) {
          error = std::current_exception();
        }
      }
      std::lock_guard lock(mu);
      done = true;
      cv.notify_all();
    });
  }
  constexpr auto kSignalPoll = std::chrono::milliseconds(50);
  while (true) {
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, kSignalPoll, [&] { return done; })) break;
    }
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set raised;  // takes the handler's exception (KeyboardInterrupt)
      cancel.Cancel();
      {
        py::gil_scoped_release release;
        worker.join();
        result.reset();  // finished before it saw the cancel: dropped, its threads joined
      }
      throw raised;
    }
  }
  {
    py::gil_scoped_release release;
    worker.join();
  }
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace gpufeed::python
