// `gpufeed demo`: no arguments needed. Makes the demo data set if missing, runs two epochs
// at batch 8192 with a simulated GPU step, shows live progress, and ends with a summary.
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed::cli {

void RegisterDemoCommand(CLI::App& app);

}  // namespace gpufeed::cli
