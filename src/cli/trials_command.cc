#include "cli/trials_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace gpufeed {
namespace {

bool IsFile(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// The interpreter: $GPUFEED_PYTHON; else the one the package was built for, when it is there
// (python3 first on PATH may be another, without torch or the package: "No module named
// gpufeed"); else python3 from PATH.
std::string ChooseInterpreter() {
  const char* given = std::getenv("GPUFEED_PYTHON");
  if (given != nullptr && *given != '\0') return given;
#ifdef GPUFEED_PYTHON_INTERPRETER
  if (access(GPUFEED_PYTHON_INTERPRETER, X_OK) == 0) return GPUFEED_PYTHON_INTERPRETER;
#endif
  return "python3";
}

// The folder holding the gpufeed package that belongs to this binary, for PYTHONPATH: the
// package it ships in (a pip install: <site>/gpufeed/bin/gpufeed), else the build tree's
// staged copy (<build>/python/gpufeed); empty when neither is there (an installed package is
// then the interpreter's to find).
std::string PackageRoot() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path package = exe.parent_path().parent_path();
    if (package.filename() == "gpufeed" && IsFile(package / "__init__.py")) {
      return package.parent_path().string();
    }
  }
#ifdef GPUFEED_PYTHON_BUILD_DIR
  if (IsFile(std::filesystem::path(GPUFEED_PYTHON_BUILD_DIR) / "gpufeed" / "__init__.py")) {
    return GPUFEED_PYTHON_BUILD_DIR;
  }
#endif
  return {};
}

}  // namespace

void RegisterTrialsCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "trials",
      "Where an Optuna study's time went (counts, durations, start-up share, data wait, GPU "
      "busy per trial state, and a verdict): gpufeed trials STORAGE_URL [--study NAME] "
      "[--json]. Runs the Python package's implementation (needs python3-optuna).");
  sub->prefix_command();  // every argument after `trials` goes to Python untouched
  sub->callback([sub] {
    const std::string python = ChooseInterpreter();
    if (const std::string root = PackageRoot(); !root.empty()) {
      const char* old = std::getenv("PYTHONPATH");
      const std::string path = old != nullptr && *old != '\0' ? root + ":" + old : root;
      setenv("PYTHONPATH", path.c_str(), 1);
    }
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
