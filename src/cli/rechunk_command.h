// `gpufeed rechunk IN.h5 OUT.h5`: rewrites an HDF5 file with chunks of whole samples along
// axis 0 (sources/hdf5/tools/rechunk.h), with progress, refusing to overwrite without --force.
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed::cli {

void RegisterRechunkCommand(CLI::App& app);

}  // namespace gpufeed::cli
