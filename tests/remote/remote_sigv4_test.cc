// S3 requests are signed as AWS checks them: the request heads libcurl sends are checked by
// an independent SigV4 computation (sigv4_verify.py), which a wrong secret fails. s3rver
// checks the access key but not the signature, so this is where signatures are proven.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/http_test_server.h"

namespace gpufeed {
namespace {

std::string Verify(const std::string& head, const std::string& secret) {
  const std::string path = ::testing::TempDir() + "/sigv4_head_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary) << head;
  const std::string command =
      "/usr/bin/python3 " GPUFEED_SOURCE_DIR "/tests/remote/sigv4_verify.py " + path + " " + secret;
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    ::pclose(p);
  }
  std::remove(path.c_str());
  return out;
}

// Answers HEAD with a 5-byte object and a ranged GET with its bytes.
std::string ObjectReply(const std::string& request) {
  if (request.starts_with("HEAD")) {
    return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\n\r\n";
  }
  return "HTTP/1.1 206 Partial Content\r\nContent-Length: 5\r\nContent-Range: bytes 0-4/5\r\n"
         "ETag: \"e1\"\r\n\r\nhello";
}

TEST(SigV4, RequestsCarryValidSignaturesOverEveryHeaderThatMatters) {
  testing::HttpTestServer server(ObjectReply);
  setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "secret/with+chars", 1);
  setenv("AWS_SESSION_TOKEN", "token=abc", 1);
  auto fs = RemoteFileSystem::Create({.endpoint = server.endpoint(), .region = "eu-west-3"});
  auto file = fs->Open("s3://bkt/dir/a b+c~d%.bin");
  char buf[5];
  ASSERT_EQ(file->ReadAt(0, buf, 5), 5u);
  EXPECT_EQ(std::string(buf, 5), "hello");
  unsetenv("AWS_SESSION_TOKEN");
  const std::vector<std::string> heads = server.requests();
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_TRUE(heads[0].starts_with("HEAD /bkt/dir/a%20b%2Bc~d%25.bin HTTP/1.1\r\n")) << heads[0];
  for (const std::string& head : heads) {
    const std::string verdict = Verify(head, "secret/with+chars");
    EXPECT_TRUE(verdict.starts_with("ok AKIDTEST")) << verdict << "\n" << head;
    EXPECT_NE(verdict.find("x-amz-content-sha256"), std::string::npos) << verdict;
    EXPECT_NE(verdict.find("x-amz-security-token"), std::string::npos) << verdict;
    EXPECT_NE(head.find("/eu-west-3/s3/aws4_request"), std::string::npos) << head;
    EXPECT_NE(head.find("x-amz-content-sha256: UNSIGNED-PAYLOAD"), std::string::npos) << head;
    EXPECT_TRUE(Verify(head, "wrong-secret").starts_with("mismatch")) << head;
  }
  EXPECT_NE(heads[1].find("Range: bytes=0-4"), std::string::npos) << heads[1];
  EXPECT_NE(heads[1].find("If-Match: \"e1\""), std::string::npos) << heads[1];
  EXPECT_NE(Verify(heads[1], "secret/with+chars").find("range"), std::string::npos);
}

TEST(SigV4, ListingQueriesAreSignedSorted) {
  testing::HttpTestServer server([](const std::string&) {
    const std::string body =
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>p/x</Key>"
        "<Size>1</Size></Contents></ListBucketResult>";
    return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  });
  setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
  auto fs = RemoteFileSystem::Create({.endpoint = server.endpoint(), .region = "us-east-1"});
  ASSERT_EQ(fs->List("s3://bkt/p").size(), 1u);
  const std::vector<std::string> heads = server.requests();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_TRUE(heads[0].starts_with("GET /bkt?encoding-type=url&list-type=2&prefix=p%2F "))
      << heads[0];
  EXPECT_TRUE(Verify(heads[0], "s").starts_with("ok")) << Verify(heads[0], "s");
}

TEST(SigV4, AnonymousRequestsAreUnsigned) {
  testing::HttpTestServer server(ObjectReply);
  auto fs = RemoteFileSystem::Create(
      {.anonymous = true, .endpoint = server.endpoint(), .region = "us-east-1"});
  EXPECT_EQ(fs->Open("s3://bkt/k")->Size(), 5u);
  const std::vector<std::string> heads = server.requests();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(heads[0].find("Authorization"), std::string::npos) << heads[0];
}

}  // namespace
}  // namespace gpufeed
