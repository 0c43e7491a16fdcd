// `gpufeed inspect FILE [--json]`: what an HDF5 file costs to read at random and what to do
// about it (see sources/hdf5/tools/inspect.h for the figures).
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed::cli {

void RegisterInspectCommand(CLI::App& app);

}  // namespace gpufeed::cli
