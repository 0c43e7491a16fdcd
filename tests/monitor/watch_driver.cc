// `gpufeed watch` as its own program for the tests: the watch subcommand and the CLI's error
// rule (a gpufeed::Error prints its message and exits non-zero).
#include <cstdio>

#include "cli/watch_command.h"
#include "gpufeed/error.h"

int main(int argc, char** argv) {
  CLI::App app("gpufeed (watch only, for tests)");
  app.require_subcommand(1);
  gpufeed::RegisterWatchCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gpufeed::Error& e) {
    std::fprintf(stderr, "gpufeed: %s\n", e.what());
    return 1 + static_cast<int>(e.code());
  }
  return 0;
}
