// The `gpufeed` command line: demo, bench, inspect, rechunk, watch, cache and trials.
#include <CLI/CLI.hpp>

#include "cli/bench_command.h"
#include "cli/demo_command.h"
#include "cli/exit_codes.h"
#include "cli/inspect_command.h"
#include "cli/rechunk_command.h"
#include "cli/trials_command.h"
#include "cli/watch_command.h"
#include "cli/cache_command.h"

int main(int argc, char** argv) {
  using namespace gpufeed;       // NOLINT: the commands' Register functions
  using namespace gpufeed::cli;  // NOLINT
  CLI::App app(
      "gpufeed keeps a training GPU busy: a parallel loader for HDF5, NumPy, SQLite,\n"
      "PostgreSQL and image folders with pinned, ahead-of-time copies to the GPU, caches in\n"
      "RAM, shared memory and GPU memory, a monitor, and a doctor that says why a GPU waits.\n"
      "Exit codes: 2 invalid argument, 3 not found, 4 corrupt data, 5 I/O error, 6 device\n"
      "error, 7 unsupported.");
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpufeed 0.1.0");
  RegisterDemoCommand(app);
  RegisterBenchCommand(app);
  RegisterInspectCommand(app);
  RegisterRechunkCommand(app);
  RegisterWatchCommand(app);
  RegisterCacheCommand(app);
  RegisterTrialsCommand(app);
  return RunReportingErrors([&] {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    return 0;
  });
}
