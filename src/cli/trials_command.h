// `gpufeed trials STORAGE [--study NAME] [--json]`: where an Optuna study's time went.
// Reading an Optuna storage needs Optuna, which is Python: the command is implemented in the
// Python package (gpufeed.optuna.main); this binary hands the arguments to
// `$GPUFEED_PYTHON -m gpufeed trials ...` (default python3), which needs the gpufeed package
// and Optuna importable there.
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed {

// Adds the `trials` subcommand to `app`. Its callback replaces the process with Python (the
// exit code is Python's); throws CLI::RuntimeError(127) when Python cannot be run.
void RegisterTrialsCommand(CLI::App& app);

}  // namespace gpufeed
