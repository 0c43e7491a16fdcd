// The `gpufeed` command line: demo, bench, inspect, rechunk, watch, cache and trials (cli/app.h).
#include "cli/app.h"

int main(int argc, char** argv) {
  const std::unique_ptr<CLI::App> app = gpufeed::cli::MakeApp();
  return gpufeed::cli::RunCommandLine(*app, argc, argv);
}
