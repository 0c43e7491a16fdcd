// Every command's --help is generated from the options it registers: each option and
// positional a command parses appears in its help, and no command takes arguments CLI11 does
// not parse (a prefix command or allowed extras would hand them to code --help knows nothing
// of).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/app.h"

namespace gpufeed::cli {
namespace {

// Every subcommand below `app`, depth first, with its path ("cache rm").
void Collect(CLI::App* app, const std::string& path,
             std::vector<std::pair<std::string, CLI::App*>>& out) {
  for (CLI::App* sub : app->get_subcommands({})) {
    const std::string name = path.empty() ? sub->get_name() : path + " " + sub->get_name();
    out.emplace_back(name, sub);
    Collect(sub, name, out);
  }
}

std::vector<std::pair<std::string, CLI::App*>> AllCommands(CLI::App& app) {
  std::vector<std::pair<std::string, CLI::App*>> out;
  Collect(&app, "", out);
  return out;
}

TEST(CliHelp, EveryCommandIsRegistered) {
  const auto app = MakeApp();
  std::vector<std::string> names;
  for (const auto& [name, sub] : AllCommands(*app)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"demo", "bench", "inspect", "rechunk", "watch",
                                             "cache", "cache ls", "cache rm", "cache gc",
                                             "cache verify", "cache build", "trials"}));
}

TEST(CliHelp, HelpNamesEveryOptionAndPositionalACommandRegisters) {
  const auto app = MakeApp();
  for (const auto& [name, sub] : AllCommands(*app)) {
    const std::string help = sub->help();
    for (const CLI::Option* opt : sub->get_options()) {
      for (const std::string& l : opt->get_lnames()) {
        EXPECT_NE(help.find("--" + l), std::string::npos) << name << " --help lacks --" << l;
      }
      for (const std::string& s : opt->get_snames()) {
        EXPECT_NE(help.find("-" + s), std::string::npos) << name << " --help lacks -" << s;
      }
      if (opt->get_positional()) {
        EXPECT_NE(help.find(opt->get_name()), std::string::npos)
            << name << " --help lacks its positional " << opt->get_name();
      }
      if (!opt->get_description().empty()) {
        EXPECT_NE(help.find(opt->get_description().substr(0, 20)), std::string::npos)
            << name << " --help lacks the description of " << opt->get_name();
      }
    }
  }
}

TEST(CliHelp, NoCommandParsesArgumentsByHand) {
  const auto app = MakeApp();
  for (const auto& [name, sub] : AllCommands(*app)) {
    EXPECT_FALSE(sub->get_prefix_command()) << name << " passes its arguments on unparsed";
    EXPECT_FALSE(sub->get_allow_extras()) << name << " accepts arguments it does not register";
  }
}

// The commands whose synopsis users copy from the docs: their positionals and options.
TEST(CliHelp, TrialsHelpListsItsStorageStudyAndJson) {
  const auto app = MakeApp();
  const std::string help = app->get_subcommand("trials")->help();
  EXPECT_NE(help.find("storage"), std::string::npos) << help;
  EXPECT_NE(help.find("REQUIRED"), std::string::npos) << help;
  EXPECT_NE(help.find("--study"), std::string::npos) << help;
  EXPECT_NE(help.find("--json"), std::string::npos) << help;
}

TEST(CliHelp, TrialsParsesItsOptionsAndRejectsOthers) {
  const auto app = MakeApp();
  CLI::App* trials = app->get_subcommand("trials");
  trials->callback({});  // parse only: the real callback replaces the process with Python
  std::vector<std::string> args = {"--json", "s1", "--study", "sqlite:///x.db", "trials"};
  app->parse(args);  // CLI11 takes a reversed argv
  EXPECT_EQ(trials->count("--study"), 1u);
  EXPECT_EQ(trials->get_option("storage")->as<std::string>(), "sqlite:///x.db");
  EXPECT_EQ(trials->get_option("--study")->as<std::string>(), "s1");

  const auto fresh = MakeApp();
  fresh->get_subcommand("trials")->callback({});
  std::vector<std::string> bad = {"--nope", "sqlite:///x.db", "trials"};
  EXPECT_THROW(fresh->parse(bad), CLI::ParseError);
  std::vector<std::string> none = {"trials"};
  const auto third = MakeApp();
  third->get_subcommand("trials")->callback({});
  EXPECT_THROW(third->parse(none), CLI::RequiredError);
}

// `bench` opens what OpenPath opens, image folders and lists, and database URIs; `cache build`
// what OpenPath opens. Their help says so.
TEST(CliHelp, BenchAndCacheBuildHelpNameEveryKindOfDataSetTheyOpen) {
  const auto app = MakeApp();
  const std::string bench = app->get_subcommand("bench")->help();
  for (const char* kind : {".npy", "HDF5", "ImageFolder", ".csv", "sqlite:///", "postgresql://",
                           "table=", "query=", "key=", "connections=", "--group"}) {
    EXPECT_NE(bench.find(kind), std::string::npos) << "bench --help lacks " << kind;
  }
  const std::string build = app->get_subcommand("cache")->get_subcommand("build")->help();
  for (const char* kind : {".npy", "HDF5", "sqlite:///", "postgresql://"}) {
    EXPECT_NE(build.find(kind), std::string::npos) << "cache build --help lacks " << kind;
  }
}

int ExitCodeOf(std::vector<const char*> argv) {
  const auto app = MakeApp();
  return RunCommandLine(*app, static_cast<int>(argv.size()), argv.data());
}

// The exit codes main's help documents: 2 for a bad command line, whatever CLI11 calls it;
// the command's own code otherwise.
TEST(CliExitCodes, ARejectedCommandLineExitsTwoAndHelpZero) {
  EXPECT_EQ(ExitCodeOf({"gpufeed", "bench", "--no-such-option"}), 2);
  EXPECT_EQ(ExitCodeOf({"gpufeed", "inspect"}), 2);  // a required positional missing
  EXPECT_EQ(ExitCodeOf({"gpufeed", "demo", "--format", "csv"}), 2);
  EXPECT_EQ(ExitCodeOf({"gpufeed", "trials"}), 2);
  EXPECT_EQ(ExitCodeOf({"gpufeed"}), 2);  // no command
  EXPECT_EQ(ExitCodeOf({"gpufeed", "trials", "--help"}), 0);
  EXPECT_EQ(ExitCodeOf({"gpufeed", "--version"}), 0);
  EXPECT_EQ(ExitCodeOf({"gpufeed", "inspect", "/no/such/file.h5"}), 3);  // the command's: not found
}

}  // namespace
}  // namespace gpufeed::cli
