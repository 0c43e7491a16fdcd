#include "sources/db/pg_server.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <string>

namespace gpufeed::testing {
namespace {

PgServerInfo& Info() {
  static PgServerInfo info;
  return info;
}

class PgServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PgServerInfo& info = Info();
    // The script takes this folder over (chown to the postgres user when run as root) and
    // stop removes it.
    char dir[] = "/tmp/gpufeed-pg-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      info.failure = "mkdtemp failed";
      return;
    }
    dir_ = dir;
    const std::string command = std::string("'") + GPUFEED_PG_TEST_SERVER + "' start '" + dir_ +
                                "' --watch " + std::to_string(getpid()) + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) {
      info.failure = "popen failed";
      return;
    }
    std::string output;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
    const int status = pclose(pipe);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    while (!output.empty() && output.back() == '\n') output.pop_back();
    if (code == 77) {
      info.skip_reason = output;
      return;
    }
    if (code != 0) {
      info.failure = output;
      return;
    }
    info.conninfo = output.substr(output.rfind('\n') + 1);
    std::smatch m;
    if (std::regex_search(info.conninfo, m, std::regex("host=(\\S+) port=(\\d+)"))) {
      info.socket_dir = m[1];
      info.port = std::stoi(m[2]);
    }
    started_ = true;
  }

  void TearDown() override {
    if (started_) {
      const std::string command =
          std::string("'") + GPUFEED_PG_TEST_SERVER + "' stop '" + dir_ + "' >/dev/null 2>&1";
      if (system(command.c_str()) != 0) fprintf(stderr, "pg-test-server stop failed\n");
    }
  }

 private:
  std::string dir_;
  bool started_ = false;
};

// Registered before main() runs the tests (gtest_main); GoogleTest owns and deletes it.
[[maybe_unused]] const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PgServerEnvironment);

}  // namespace

const PgServerInfo& PgServer() { return Info(); }

}  // namespace gpufeed::testing
