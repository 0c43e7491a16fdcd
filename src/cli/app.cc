#include "cli/app.h"

#include "cli/bench_command.h"
#include "cli/cache_command.h"
#include "cli/demo_command.h"
#include "cli/inspect_command.h"
#include "cli/trials_command.h"
#include "cli/watch_command.h"

namespace gpufeed::cli {

std::unique_ptr<CLI::App> MakeApp() {
  auto app = std::make_unique<CLI::App>(
      "gpufeed keeps a training GPU busy: a parallel loader for HDF5, NumPy, SQLite,\n"
      "PostgreSQL and image folders with pinned, ahead-of-time copies to the GPU, caches in\n"
      "RAM, shared memory and GPU memory, a monitor, and a doctor that says why a GPU waits.\n"
      "Exit codes: 2 invalid argument, 3 not found, 4 corrupt data, 5 I/O error, 6 device\n"
      "error, 7 unsupported.",
      "gpufeed");
  app->require_subcommand(1);
  app->set_version_flag("--version", "gpufeed 0.1.0");
  RegisterDemoCommand(*app);
  RegisterBenchCommand(*app);
  RegisterInspectCommand(*app);
  gpufeed::RegisterWatchCommand(*app);
  RegisterCacheCommand(*app);
  gpufeed::RegisterTrialsCommand(*app);
  return app;
}

}  // namespace gpufeed::cli
