// SigintCancels: while one is alive, Ctrl-C (SIGINT) cancels the long open its thread runs
// (gpufeed/cancel.h: an shm cache build, a RAM preload, a device upload, a big HDF5 index)
// instead of killing the process on the spot. The open cleans up what it made (an shm build
// removes its half-written file and releases its lock) and throws Error(kCancelled), which
// the CLI reports with exit code 130, the code a shell gives a command Ctrl-C ended. A second
// Ctrl-C kills as before (the handler is installed with SA_RESETHAND). When SIGINT is ignored
// (a background job of a non-interactive shell), it stays ignored. The previous disposition
// is restored when the SigintCancels ends, so Ctrl-C during the run that follows the open
// ends the process as usual.
// Thread-safety: at most one alive per process; made and destroyed on the same thread.
#pragma once

#include <signal.h>

#include <string_view>

#include "gpufeed/cancel.h"

namespace gpufeed::cli {

class SigintCancels {
 public:
  SigintCancels();
  ~SigintCancels();
  SigintCancels(const SigintCancels&) = delete;
  SigintCancels& operator=(const SigintCancels&) = delete;

  // Throws Error(kCancelled, "<what>: interrupted") when Ctrl-C came: for a cancel that
  // arrived after the open's last check, so the open's result is not used.
  void ThrowIfInterrupted(std::string_view what) const;

 private:
  CancelToken token_;
  CancelScope scope_;
  struct sigaction previous_ {};
  bool installed_ = false;
};

}  // namespace gpufeed::cli
