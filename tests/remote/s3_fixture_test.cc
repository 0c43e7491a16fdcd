// S3Fixture itself: the server starts, data put through it reads back through the proxy,
// and the proxy's rules and counts are reachable from C++.
#include "remote/s3_fixture.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace gpufeed::testing {
namespace {

class S3FixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = S3Fixture::UnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    s3_ = std::make_unique<S3Fixture>();
  }

  std::unique_ptr<S3Fixture> s3_;
};

TEST_F(S3FixtureTest, PutObjectReadsBackThroughTheProxy) {
  s3_->CreateBucket("fixture");
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  s3_->Put("fixture", "dir/a b+c.bin", bytes);
  const auto whole = S3Fixture::Http(s3_->endpoint(), "GET", "/fixture/dir/a%20b%2Bc.bin", "");
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.body, bytes);
  s3_->Put("fixture", "dir/a b+c.bin", "replaced");
  EXPECT_EQ(S3Fixture::Http(s3_->endpoint(), "GET", "/fixture/dir/a%20b%2Bc.bin", "").body,
            "replaced");
  const nlohmann::json counts = s3_->Counts();
  EXPECT_EQ(counts["by_method"]["GET"], 2);
  EXPECT_EQ(counts["bytes"], bytes.size() + 8);
  EXPECT_EQ(s3_->access_key(), "S3RVER");
  EXPECT_EQ(s3_->region(), "us-east-1");
  EXPECT_NE(s3_->endpoint(), s3_->direct_endpoint());
}

TEST_F(S3FixtureTest, RulesInjectFailuresAndResetClearsThem) {
  s3_->CreateBucket("rules");
  s3_->Put("rules", "k", "value");
  s3_->SetRules({{"fail_status", 503}, {"fail_count", 1}, {"retry_after", "2"}});
  const auto failed = S3Fixture::Http(s3_->endpoint(), "GET", "/rules/k", "");
  EXPECT_EQ(failed.status, 503);
  EXPECT_NE(failed.body.find("<Code>SlowDown</Code>"), std::string::npos);
  EXPECT_EQ(S3Fixture::Http(s3_->endpoint(), "GET", "/rules/k", "").body, "value");
  EXPECT_EQ(s3_->Counts()["by_status"]["503"], 1);
  s3_->ResetProxy();
  EXPECT_EQ(s3_->Counts()["requests"], 0);
}

TEST_F(S3FixtureTest, MissingKeyIsNoSuchKey) {
  s3_->CreateBucket("missing");
  const auto r = S3Fixture::Http(s3_->endpoint(), "GET", "/missing/nothing", "");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("<Code>NoSuchKey</Code>"), std::string::npos);
}

}  // namespace
}  // namespace gpufeed::testing
