// How the CLI turns errors into exit codes: one code per gpufeed::ErrorCode, so scripts can
// tell a bad argument from a corrupt file from a missing GPU.
// Thread-safety: pure functions.
#pragma once

#include <functional>

#include "gpufeed/error.h"

namespace gpufeed::cli {

// invalid argument 2, not found 3, corrupt data 4, I/O 5, device 6, unsupported 7,
// cancelled 130; any other failure 1.
int ExitCodeFor(ErrorCode code);

// Runs `body`; prints "gpufeed: <error>" to stderr and returns the exit code on failure.
int RunReportingErrors(const std::function<int()>& body);

}  // namespace gpufeed::cli
