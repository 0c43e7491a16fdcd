#include "cli/trials_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace gpufeed {

void RegisterTrialsCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "trials",
      "Where an Optuna study's time went (counts, durations, start-up share, data wait, GPU "
      "busy per trial state, and a verdict): gpufeed trials STORAGE_URL [--study NAME] "
      "[--json]. Runs the Python package's implementation (needs python3-optuna).");
  sub->prefix_command();  // every argument after `trials` goes to Python untouched
  sub->callback([sub] {
    const char* given = std::getenv("GPUFEED_PYTHON");
    const std::string python = given != nullptr && *given != '\0' ? given : "python3";
    std::vector<std::string> args = {python, "-m", "gpufeed", "trials"};
    for (const std::string& a : sub->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr,
                 "gpufeed trials: cannot run %s (set GPUFEED_PYTHON to a Python with "
                 "the gpufeed package and Optuna): %s\n",
                 python.c_str(), std::strerror(errno));
    throw CLI::RuntimeError(127);
  });
}

}  // namespace gpufeed
