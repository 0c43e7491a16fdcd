// `gpufeed cache ls | rm KEY...|--all | gc | verify KEY...|--disk | build PATH`: the
// shared-memory caches of this node (see gpufeed/shm_caches.h), and `verify --disk` for the
// node-local disk cache of remote data (remote/disk_cache.h).
#pragma once

#include <CLI/CLI.hpp>

namespace gpufeed::cli {

void RegisterCacheCommand(CLI::App& app);

}  // namespace gpufeed::cli
