// `gpufeed cache ls | rm KEY...|--all | gc | build PATH`: the shared-memory caches of this
// node (see gpufeed/cache.h).
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed::cli {

void RegisterCacheCommand(CLI::App& app);

}  // namespace gpufeed::cli
