// S3Suite: a GoogleTest fixture over one S3Fixture (s3rver behind the fault proxy) per suite,
// with its credentials in the environment and bucket "data"; Catch, for tests that assert on
// an error's code and message. Each suite derives from S3Suite<itself> and may define
// `static void Seed(S3Fixture&)` to put its objects once. Tests skip, saying why, where node
// or its packages are missing. One thread at a time, like S3Fixture.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gpufeed/error.h"
#include "gpufeed/remote.h"
#include "remote/s3_fixture.h"

namespace gpufeed::testing {

struct Caught {
  ErrorCode code = ErrorCode::kCancelled;
  std::string message;
};

// The code and message of the gpufeed::Error `f` throws; a test failure when none.
template <typename F>
Caught Catch(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

template <typename Suite>
class S3Suite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!S3Fixture::UnavailableReason().empty()) return;
    s3_ = new S3Fixture({"--bucket", "data"});
    setenv("AWS_ACCESS_KEY_ID", s3_->access_key().c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", s3_->secret_key().c_str(), 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    Suite::Seed(*s3_);
  }
  static void TearDownTestSuite() {
    delete s3_;
    s3_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = S3Fixture::UnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    s3_->ResetProxy();
  }
  static void Seed(S3Fixture&) {}

  // The store's endpoint, 4 attempts within 20 s, 5 s to connect and 10 s between bytes.
  static RemoteOptions Options() {
    RemoteOptions o;
    o.endpoint = s3_->endpoint();
    o.region = s3_->region();
    o.max_attempts = 4;
    o.retry_budget_s = 20;
    o.connect_timeout_s = 5;
    o.read_timeout_s = 10;
    return o;
  }

  static inline S3Fixture* s3_ = nullptr;
};

}  // namespace gpufeed::testing
