#include "cli/app.h"

#include "cli/bench_command.h"
#include "cli/cache_command.h"
#include "cli/demo_command.h"
#include "cli/exit_codes.h"
#include "cli/inspect_command.h"
#include "cli/rechunk_command.h"
#include "cli/trials_command.h"
#include "cli/watch_command.h"

namespace gpufeed::cli {

std::unique_ptr<CLI::App> MakeApp() {
  auto app = std::make_unique<CLI::App>(
      "gpufeed keeps a training GPU busy: a parallel loader for HDF5, NumPy, SQLite,\n"
      "PostgreSQL and image folders with pinned, ahead-of-time copies to the GPU, caches in\n"
      "RAM, shared memory and GPU memory, a monitor, and a doctor that says why a GPU waits.\n"
      "Exit codes: 2 invalid argument, 3 not found, 4 corrupt data, 5 I/O error, 6 device\n"
      "error, 7 unsupported, 8 permission denied.",
      "gpufeed");
  app->require_subcommand(1);
  app->set_version_flag("--version", "gpufeed 0.1.0");
  RegisterDemoCommand(*app);
  RegisterBenchCommand(*app);
  RegisterInspectCommand(*app);
  RegisterRechunkCommand(*app);
  gpufeed::RegisterWatchCommand(*app);
  RegisterCacheCommand(*app);
  gpufeed::RegisterTrialsCommand(*app);
  return app;
}

int RunCommandLine(CLI::App& app, int argc, const char* const* argv) {
  return RunReportingErrors([&] {
    try {
      app.parse(argc, argv);
    } catch (const CLI::RuntimeError& e) {
      return app.exit(e);  // a command's own exit code, thrown from its callback
    } catch (const CLI::ParseError& e) {
      // CLI11 numbers its parse errors from 100 up; the exit codes gpufeed documents
      // (main's help) say 2 for a bad argument, whichever part of the line it is in.
      const int code = app.exit(e);
      return code == 0 ? 0 : ExitCodeFor(ErrorCode::kInvalidArgument);
    }
    return 0;
  });
}

}  // namespace gpufeed::cli
