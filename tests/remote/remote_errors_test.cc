// What a missing or forbidden remote path says: the store's status line, error code, request
// id, host id and endpoint, in the AWS CLI's words, for objects, buckets, prefixes and
// http(s) URLs; against s3rver behind the fault proxy, and an in-process HTTP server for the
// answers s3rver cannot give.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/io/missing_path.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/http_test_server.h"
#include "remote/s3_fixture.h"
#include "remote/s3_suite.h"
#include "remote/store_answer.h"

namespace gpufeed {
namespace {

using testing::Catch;
using testing::Caught;
using ::testing::HasSubstr;
using testing::HttpTestServer;
using testing::S3Fixture;
using testing::S3Suite;

// "request id R, host id H": the ids the proxy gave its answer.
std::string Ids(const nlohmann::json& answer) {
  return "request id " + answer.at("request_id").get<std::string>() + ", host id " +
         answer.at("host_id").get<std::string>();
}

class RemoteErrors : public S3Suite<RemoteErrors> {
 public:
  static void Seed(S3Fixture& s3) {
    s3.Put("data", "train/a.bin", "a");
    s3.CreateBucket("empty-bucket");
  }

 protected:
  static std::shared_ptr<RemoteFileSystem> Fs() {
    RemoteOptions o;
    o.endpoint = s3_->endpoint();
    o.region = s3_->region();
    o.max_attempts = 2;
    o.retry_budget_s = 10;
    return RemoteFileSystem::Create(o);
  }

  // The proxy's last answer to `method` on `path`.
  static nlohmann::json AnswerTo(const std::string& method, const std::string& path) {
    const nlohmann::json answers = s3_->Answers();
    for (auto it = answers.rbegin(); it != answers.rend(); ++it) {
      if ((*it)["method"] == method && (*it)["path"] == path) return *it;
    }
    ADD_FAILURE() << "no " << method << " " << path << " in " << answers.dump();
    return {{"request_id", "?"}, {"host_id", "?"}};
  }
};

TEST_F(RemoteErrors, AMissingKeyQuotesTheHeadAndTheListingThatProveTheBucketThere) {
  auto fs = Fs();
  ASSERT_EQ(fs->Type("s3://data/nope.h5"), PathType::kMissing);
  const std::string head = Ids(AnswerTo("HEAD", "/data/nope.h5"));
  const std::string listing = Ids(AnswerTo("GET", "/data"));
  const Caught c = Catch(
      [&] { ThrowMissing(*fs, "s3://data/nope.h5", "s3://data/nope.h5: no such file or folder"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  for (const std::string& part :
       {"s3://data/nope.h5: no such file or folder: An error occurred (NoSuchKey) when calling "
        "the HeadObject operation: HTTP 404 Not Found (" +
            head + ", endpoint " + s3_->endpoint() + ")",
        "the bucket is there: ListObjectsV2 of prefix 'nope.h5/' found no objects (HTTP 200 OK, " +
            listing + ")"}) {
    EXPECT_THAT(c.message, HasSubstr(part));
  }
  // Open reads the code from a one-byte GET, the HEAD having no body.
  const Caught open = Catch([&] { fs->Open("s3://data/nope.h5"); });
  EXPECT_EQ(open.code, ErrorCode::kNotFound);
  EXPECT_THAT(open.message, HasSubstr("s3://data/nope.h5: An error occurred (NoSuchKey) when "
                                      "calling the HeadObject operation: HTTP 404 Not Found: "));
  EXPECT_THAT(open.message, HasSubstr(Ids(AnswerTo("HEAD", "/data/nope.h5")) + ", endpoint " +
                                      s3_->endpoint() + ", bucket 'data', key 'nope.h5'"));
  EXPECT_THAT(open.message,
              HasSubstr("the code as a one-byte GetObject answered it, request id " +
                        AnswerTo("GET", "/data/nope.h5")["request_id"].get<std::string>()));
}

TEST_F(RemoteErrors, AMissingBucketIsNoSuchBucketFromItsListing) {
  auto fs = Fs();
  Caught c = Catch([&] { fs->Type("s3://no-such-bucket/x.h5"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  EXPECT_THAT(c.message, HasSubstr("An error occurred (NoSuchBucket) when calling the "
                                   "ListObjectsV2 operation: HTTP 404 Not Found"));
  EXPECT_THAT(c.message,
              HasSubstr(Ids(AnswerTo("GET", "/no-such-bucket")) + ", endpoint " + s3_->endpoint()));
  c = Catch([&] { fs->Open("s3://no-such-bucket/x.h5"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  EXPECT_THAT(c.message, HasSubstr("An error occurred (NoSuchBucket) when calling the HeadObject "
                                   "operation: HTTP 404 Not Found"));
  EXPECT_THAT(c.message, HasSubstr(Ids(AnswerTo("HEAD", "/no-such-bucket/x.h5"))));
}

TEST_F(RemoteErrors, AnEmptyPrefixOrBucketSaysWhatTheListingAnswered) {
  auto fs = Fs();
  ASSERT_EQ(fs->Type("s3://data/empty/"), PathType::kMissing);
  const std::string listed = "ListObjectsV2 of prefix 'empty/' found no objects (HTTP 200 OK, " +
                             Ids(AnswerTo("GET", "/data")) + ", endpoint " + s3_->endpoint() + ")";
  EXPECT_THAT(fs->WhyMissing("s3://data/empty/"), HasSubstr(listed));
  Caught c = Catch([&] { fs->List("s3://data/empty/"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  EXPECT_THAT(c.message, HasSubstr(listed));
  ASSERT_EQ(fs->Type("s3://empty-bucket"), PathType::kMissing);
  EXPECT_THAT(fs->WhyMissing("s3://empty-bucket"),
              HasSubstr("ListObjectsV2 of the bucket found no objects (HTTP 200 OK, " +
                        Ids(AnswerTo("GET", "/empty-bucket"))));
  // A path a listing made earlier answers for: that listing is the evidence, no request sent.
  ASSERT_EQ(fs->Type("s3://data/train/"), PathType::kDirectory);
  const std::string train = Ids(AnswerTo("GET", "/data"));
  const int64_t requests = s3_->Counts()["requests"];
  ASSERT_EQ(fs->Type("s3://data/train/none.bin"), PathType::kMissing);
  EXPECT_EQ(s3_->Counts()["requests"], requests);
  EXPECT_THAT(fs->WhyMissing("s3://data/train/none.bin"),
              HasSubstr("ListObjectsV2 of prefix 'train/' found no objects at 'train/none.bin' "
                        "or under 'train/none.bin/' (HTTP 200 OK, " +
                        train));
  // A manifest given to the program is no answer of the store's, and says so.
  fs->AddManifest("s3://data/given/", {{"s3://data/given/x.bin", 1, "e"}});
  EXPECT_THAT(fs->WhyMissing("s3://data/given/y.bin"),
              HasSubstr("the manifest given to the program for prefix 'given/' holds no objects"));
}

TEST_F(RemoteErrors, ForbiddenIsPermissionDeniedWithTheCodeAndIds) {
  setenv("AWS_SECRET_ACCESS_KEY", "WRONG", 1);
  auto wrong = Fs();  // credentials looked up at the first request
  Caught c = Catch([&] { wrong->Open("s3://data/train/a.bin"); });
  setenv("AWS_SECRET_ACCESS_KEY", s3_->secret_key().c_str(), 1);
  EXPECT_EQ(c.code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(c.message, HasSubstr("An error occurred (SignatureDoesNotMatch) when calling the "
                                   "HeadObject operation: HTTP 403 Forbidden"));
  EXPECT_THAT(c.message, HasSubstr(Ids(AnswerTo("HEAD", "/data/train/a.bin")) + ", endpoint " +
                                   s3_->endpoint()));
  EXPECT_THAT(c.message, HasSubstr("credentials from environment"));
  // A store that refuses access (s3rver does not check policies, so the 403 is injected).
  auto fs = Fs();
  s3_->SetRules({{"fail_status", 403}, {"fail_count", 2}});
  c = Catch([&] { fs->Type("s3://data/train/a.bin"); });
  EXPECT_EQ(c.code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(c.message, HasSubstr("An error occurred (AccessDenied) when calling the HeadObject "
                                   "operation: HTTP 403 Forbidden: Access Denied ("));
  EXPECT_THAT(c.message, HasSubstr(Ids(AnswerTo("HEAD", "/data/train/a.bin"))));
  s3_->SetRules(
      {{"fail_status", 403}, {"fail_count", 1}, {"fail_methods", nlohmann::json::array({"GET"})}});
  c = Catch([&] { fs->List("s3://data/train/"); });
  EXPECT_EQ(c.code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(c.message, HasSubstr("s3://data/train/: An error occurred (AccessDenied) when "
                                   "calling the ListObjectsV2 operation: HTTP 403 Forbidden"));
  EXPECT_THAT(c.message, HasSubstr(Ids(AnswerTo("GET", "/data"))));
}

TEST_F(RemoteErrors, AnHttpUrlSaysTheStatusLineAndEndpoint) {
  auto fs = Fs();
  const std::string url = s3_->endpoint() + "/data/nope.h5";  // unsigned: served anonymously
  ASSERT_EQ(fs->Type(url), PathType::kMissing);
  const std::string evidence = "HEAD answered HTTP 404 Not Found (" +
                               Ids(AnswerTo("HEAD", "/data/nope.h5")) + ", endpoint " +
                               s3_->endpoint() + ")";
  const Caught c = Catch([&] { ThrowMissing(*fs, url, url + ": no such file"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  EXPECT_EQ(c.message, url + ": no such file: " + evidence);
  const Caught open = Catch([&] { fs->Open(url); });
  EXPECT_EQ(open.code, ErrorCode::kNotFound);
  EXPECT_THAT(open.message, HasSubstr(url + ": HEAD answered HTTP 404 Not Found ("));
}

// No node needed: a server that answers as an S3 front end might, reason phrase and all.
TEST(RemoteAnswers, TheReasonPhraseAndIdsAreKeptAndControlBytesDropped) {
  HttpTestServer server([](const std::string&) {
    return std::string(
        "HTTP/1.1 404 Gone Fishing\r\nx-amz-request-id: 4442587FB7D0A2F9\r\n"
        "x-amz-id-2: host/ID+\x01=\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  });
  auto fs = RemoteFileSystem::Create();
  const std::string url = server.endpoint() + "/x.h5";
  ASSERT_EQ(fs->Type(url), PathType::kMissing);
  EXPECT_EQ(fs->WhyMissing(url),
            "HEAD answered HTTP 404 Gone Fishing (request id 4442587FB7D0A2F9, host id host/ID+?=, "
            "endpoint " +
                server.endpoint() + ")");
  EXPECT_EQ(fs->WhyMissing("/local/path"), "");
  const Caught c = Catch([&] { ThrowMissing(*PosixFileSystem(), "/no/such", "/no/such: gone"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  EXPECT_EQ(c.message, "/no/such: gone");
}

TEST(RemoteAnswers, AStatusLineWithoutAReasonGetsTheStandardOne) {
  EXPECT_EQ(remote::StatusLine(404, ""), "HTTP 404 Not Found");  // HTTP/2 sends no reason
  EXPECT_EQ(remote::StatusLine(403, "Nope"), "HTTP 403 Nope");
  EXPECT_EQ(remote::StatusLine(599, ""), "HTTP 599");
  remote::StoreAnswer head;
  head.operation = "HeadObject";
  head.status = 404;
  // No body and nothing else known: both codes named, none chosen.
  EXPECT_EQ(remote::AnswerHeadline(head, ""),
            "An error occurred (404) when calling the HeadObject operation: HTTP 404 Not Found "
            "(NoSuchKey or NoSuchBucket)");
}

}  // namespace
}  // namespace gpufeed
