// The whole `gpufeed` command line: every subcommand registered on one CLI11 App, for the
// executable (main.cc) and for the tests that check each command's --help against the options
// it registers. Thread-safety: one thread at a time (CLI11's App is not thread-safe).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace gpufeed::cli {

// The `gpufeed` App with demo, bench, inspect, watch, cache and trials registered. Every
// argument a command takes is a CLI11 option or positional, so --help lists it.
std::unique_ptr<CLI::App> MakeApp();

// Parses `argv` with `app` and runs the command; returns the process's exit code: the
// command's own, 0 for --help and --version, and 2 (invalid argument, as for every command's
// bad values) for a command line CLI11 rejects (an unknown option, a missing positional),
// with CLI11's message on stderr. A gpufeed::Error outside a command prints and maps as
// RunReportingErrors does.
int RunCommandLine(CLI::App& app, int argc, const char* const* argv);

}  // namespace gpufeed::cli
