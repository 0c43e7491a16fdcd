// The `gpufeed` command line: demo, bench, inspect, watch, cache and trials (cli/app.h).
#include <CLI/CLI.hpp>

#include "cli/app.h"
#include "cli/exit_codes.h"

int main(int argc, char** argv) {
  const std::unique_ptr<CLI::App> app = gpufeed::cli::MakeApp();
  return gpufeed::cli::RunReportingErrors([&] {
    try {
      app->parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app->exit(e);
    }
    return 0;
  });
}
