#include "cli/trials_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
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
      "Where an Optuna study's time went: per trial state the count, mean duration, share of\n"
      "trial time before the first batch, data wait and GPU busy (as gpufeed.optuna.track\n"
      "recorded them), and a verdict. Runs the Python package's implementation (needs\n"
      "python3-optuna): GPUFEED_PYTHON names the interpreter.");
  // The values are read from the options themselves, not bound to variables: nothing the
  // options write to can go away before they do (the App owns them all).
  sub->add_option("storage", "An Optuna storage URL: sqlite:///study.db, postgresql://user@host/db")
      ->type_name("TEXT")
      ->required();
  sub->add_option("--study", "The study's name (default: every study there)")->type_name("TEXT");
  sub->add_flag("--json")->description("Print JSON for machines");
  sub->callback([sub] {
    const std::string python = ChooseInterpreter();
    if (const std::string root = PackageRoot(); !root.empty()) {
      const char* old = std::getenv("PYTHONPATH");
      const std::string path = old != nullptr && *old != '\0' ? root + ":" + old : root;
      setenv("PYTHONPATH", path.c_str(), 1);
    }
    // "--study=NAME" keeps a name that starts with '-' a value for Python's argparse.
    std::vector<std::string> argv_strings = {python, "-m", "gpufeed", "trials",
                                             sub->get_option("storage")->as<std::string>()};
    if (sub->count("--study") > 0) {
      argv_strings.push_back("--study=" + sub->get_option("--study")->as<std::string>());
    }
    if (sub->count("--json") > 0) argv_strings.push_back("--json");
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
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
