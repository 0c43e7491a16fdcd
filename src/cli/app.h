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

}  // namespace gpufeed::cli
