// A private PostgreSQL server for the tests of this binary: a GoogleTest global environment
// that runs scripts/pg-test-server start in SetUp and stop in TearDown (which runs when tests
// fail too; a crash is covered by the script's watcher of this process).
// Thread-safety: set up before the tests run; then read-only.
#pragma once

#include <string>

namespace gpufeed::testing {

struct PgServerInfo {
  std::string conninfo;    // "host=/tmp/.../pg port=P user=postgres dbname=postgres"
  std::string socket_dir;  // the host= part
  int port = 0;
  std::string skip_reason;  // set when the server binaries are missing
  std::string failure;      // set when they are there and the server did not start
};

// The server of this test binary (its environment registers itself at static init).
const PgServerInfo& PgServer();

}  // namespace gpufeed::testing

// Skips the test when the server binaries are missing, fails it when the server did not
// start.
#define GPUFEED_REQUIRE_PG_SERVER()                                                      \
  do {                                                                                   \
    const auto& pg_server_ = ::gpufeed::testing::PgServer();                             \
    if (!pg_server_.skip_reason.empty()) GTEST_SKIP() << pg_server_.skip_reason;         \
    if (!pg_server_.failure.empty()) FAIL() << "pg-test-server: " << pg_server_.failure; \
  } while (0)
