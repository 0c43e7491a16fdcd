// `gpufeed bench`: throughput of the loader on a data set against the memcpy ceiling.
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed::cli {

void RegisterBenchCommand(CLI::App& app);

}  // namespace gpufeed::cli
