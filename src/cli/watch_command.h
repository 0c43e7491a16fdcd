// `gpufeed watch`: runs or attaches to a training process and shows GPU, VRAM, CPU and RAM
// live, then a summary (mean, p5, p95) and the warnings.
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed {

// Adds the `watch` subcommand to `app`. Its callback returns normally when the watched
// command exits with 0 and throws CLI::RuntimeError(code) with the command's exit code
// otherwise (127 when it cannot be run, 128+N when signal N ended it); user errors (no such
// PID, the Prometheus port in use) are thrown as gpufeed::Error.
void RegisterWatchCommand(CLI::App& app);

}  // namespace gpufeed
