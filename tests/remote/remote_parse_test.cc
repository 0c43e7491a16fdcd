// Remote pieces that need no server: URIs and their encoding, the credential chain,
// Retry-After and backoff, the ListObjectsV2 reader, range coalescing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "gpufeed/error.h"
#include "gpufeed/remote.h"
#include "remote/credentials.h"
#include "remote/list_xml.h"
#include "remote/read_plan.h"
#include "remote/retry.h"
#include "remote/uri.h"

namespace gpufeed::remote {
namespace {

ErrorCode CodeOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no Error thrown";
  return ErrorCode::kCancelled;
}

std::string MessageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

TEST(RemoteUri, RecognisesSchemes) {
  EXPECT_TRUE(IsRemoteUri("s3://b/k"));
  EXPECT_TRUE(IsRemoteUri("http://h/p"));
  EXPECT_TRUE(IsRemoteUri("https://h/p"));
  EXPECT_FALSE(IsRemoteUri("/data/s3://x"));
  EXPECT_FALSE(IsRemoteUri("S3://b/k"));
  EXPECT_FALSE(IsRemoteUri("file.h5"));
}

TEST(RemoteUri, SplitsBucketAndKeyKeepingEveryByte) {
  RemoteUri u = ParseRemoteUri("s3://my-bucket.v2/a b/%41/ü?x#y");
  EXPECT_EQ(u.scheme, UriScheme::kS3);
  EXPECT_EQ(u.bucket, "my-bucket.v2");
  EXPECT_EQ(u.key, "a b/%41/ü?x#y");
  EXPECT_EQ(ParseRemoteUri("s3://bucket").key, "");
  EXPECT_EQ(ParseRemoteUri("s3://bucket/").key, "");
  EXPECT_EQ(ParseRemoteUri("s3://bucket/train/").key, "train/");
}

TEST(RemoteUri, RefusesBadBucketNames) {
  for (const char* uri : {"s3://ab/k", "s3://Bucket/k", "s3://under_score/k", "s3://-abc/k",
                          "s3://abc-/k", "s3://a..b/k", "s3://192.168.1.1/k", "s3:///k", "s3://"}) {
    EXPECT_EQ(CodeOf([&] { ParseRemoteUri(uri); }), ErrorCode::kInvalidArgument) << uri;
  }
  EXPECT_NE(MessageOf([] { ParseRemoteUri("s3://Bucket/k"); }).find("s3://Bucket/k"),
            std::string::npos);
  EXPECT_NO_THROW(ParseRemoteUri(std::string("s3://") + std::string(63, 'a') + "/k"));
  EXPECT_ANY_THROW(ParseRemoteUri(std::string("s3://") + std::string(64, 'a') + "/k"));
}

TEST(RemoteUri, ChecksHttpUrls) {
  EXPECT_EQ(ParseRemoteUri("https://host:8443/a/b.h5").scheme, UriScheme::kHttp);
  EXPECT_EQ(CodeOf([] { ParseRemoteUri("http:///path"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { ParseRemoteUri("http://"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { ParseRemoteUri("http://h/a b"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { ParseRemoteUri("ftp://h/a"); }), ErrorCode::kInvalidArgument);
}

TEST(RemoteUri, EncodesKeysAsSigV4Wants) {
  EXPECT_EQ(SigV4Encode("a b/c+d~e_f-g.h", true), "a%20b/c%2Bd~e_f-g.h");
  EXPECT_EQ(SigV4Encode("a/b", false), "a%2Fb");
  EXPECT_EQ(SigV4Encode("%41", true), "%2541");
  EXPECT_EQ(SigV4Encode("ü", true), "%C3%BC");
  EXPECT_EQ(SigV4Encode(std::string("\0\x7f\xff", 3), true), "%00%7F%FF");
}

TEST(RemoteUri, BuildsObjectUrls) {
  EXPECT_EQ(S3ObjectUrl("http://127.0.0.1:9000/", "us-east-1", "bkt", "a b/c"),
            "http://127.0.0.1:9000/bkt/a%20b/c");
  EXPECT_EQ(S3ObjectUrl("", "eu-west-1", "bkt", "k"), "https://bkt.s3.eu-west-1.amazonaws.com/k");
  EXPECT_EQ(S3ObjectUrl("", "eu-west-1", "b.k.t", "k"),
            "https://s3.eu-west-1.amazonaws.com/b.k.t/k");
  EXPECT_EQ(S3BucketUrl("http://h:1", "r", "bkt"), "http://h:1/bkt");
  EXPECT_EQ(S3BucketUrl("", "r", "bkt"), "https://bkt.s3.r.amazonaws.com/");
  EXPECT_EQ(UrlHost("https://h:1/a/b?c"), "https://h:1");
}

// A temporary HOME with ~/.aws files, and an environment the chain reads instead of the
// process's.
class CredentialChain : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = std::filesystem::temp_directory_path() /
            ("gpufeed-aws-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(home_ / ".aws");
    env_["HOME"] = home_.string();
  }
  void TearDown() override { std::filesystem::remove_all(home_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(home_ / ".aws" / name) << text;
  }
  S3Config Resolve(RemoteOptions options = {}) {
    return ResolveS3Config(options, [this](const char* name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    });
  }
  std::filesystem::path home_;
  std::map<std::string, std::string> env_;
};

TEST_F(CredentialChain, EnvironmentFirst) {
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "SECENV";
  env_["AWS_SESSION_TOKEN"] = "TOK";
  env_["AWS_REGION"] = "eu-west-1";
  Write("credentials", "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = S\n");
  const S3Config c = Resolve();
  EXPECT_EQ(c.access_key, "AKENV");
  EXPECT_EQ(c.secret_key, "SECENV");
  EXPECT_EQ(c.session_token, "TOK");
  EXPECT_EQ(c.credentials_source, "environment");
  EXPECT_EQ(c.region, "eu-west-1");
  EXPECT_TRUE(c.endpoint.empty());
}

TEST_F(CredentialChain, ProfileFromFilesWithRegionAndEndpoint) {
  env_["AWS_PROFILE"] = "work";
  Write("credentials",
        "# comment\n[default]\naws_access_key_id=AKD\naws_secret_access_key=SD\n"
        "[work]\r\naws_access_key_id = AKW \r\naws_secret_access_key = SW\r\n");
  Write("config",
        "[default]\nregion = us-east-1\n[profile work]\nregion = ap-south-1\n"
        "endpoint_url = http://minio:9000\ns3 =\n  endpoint_url = http://nested:1\n");
  const S3Config c = Resolve();
  EXPECT_EQ(c.access_key, "AKW");
  EXPECT_EQ(c.secret_key, "SW");
  EXPECT_EQ(c.credentials_source, "~/.aws/credentials [work]");
  EXPECT_EQ(c.region, "ap-south-1");
  EXPECT_EQ(c.endpoint, "http://minio:9000");
}

TEST_F(CredentialChain, OverridesOfPathsRegionAndEndpoint) {
  Write("elsewhere", "[default]\naws_access_key_id=AKX\naws_secret_access_key=SX\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = (home_ / ".aws" / "elsewhere").string();
  env_["AWS_DEFAULT_REGION"] = "us-west-2";
  env_["AWS_ENDPOINT_URL"] = "http://generic:1";
  env_["AWS_ENDPOINT_URL_S3"] = "http://s3only:2";
  S3Config c = Resolve();
  EXPECT_EQ(c.access_key, "AKX");
  EXPECT_EQ(c.region, "us-west-2");
  EXPECT_EQ(c.endpoint, "http://s3only:2");
  env_["AWS_REGION"] = "eu-north-1";
  c = Resolve({.endpoint = "http://opt:3", .region = "opt-region"});
  EXPECT_EQ(c.region, "opt-region");
  EXPECT_EQ(c.endpoint, "http://opt:3");
}

TEST_F(CredentialChain, ExplicitProfileBeatsEnvironmentKeys) {
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "SECENV";
  env_["AWS_REGION"] = "r";
  Write("config", "[profile p]\naws_access_key_id=AKC\naws_secret_access_key=SC\n");
  const S3Config c = Resolve({.profile = "p"});
  EXPECT_EQ(c.access_key, "AKC");
  EXPECT_EQ(c.credentials_source, "~/.aws/config [profile p]");
}

TEST_F(CredentialChain, MissingCredentialsListEveryPlace) {
  env_["AWS_REGION"] = "r";
  const std::string m = MessageOf([&] { Resolve(); });
  EXPECT_NE(m.find("$AWS_ACCESS_KEY_ID"), std::string::npos) << m;
  EXPECT_NE(m.find("~/.aws/credentials [default] (no such file)"), std::string::npos) << m;
  EXPECT_NE(m.find("~/.aws/config [default] (no such file)"), std::string::npos) << m;
  EXPECT_EQ(CodeOf([&] { Resolve(); }), ErrorCode::kInvalidArgument);
  env_["AWS_ACCESS_KEY_ID"] = "only-one";
  EXPECT_NE(MessageOf([&] { Resolve(); }).find("only one set"), std::string::npos);
}

TEST_F(CredentialChain, MissingRegionListsEveryPlace) {
  env_["AWS_ACCESS_KEY_ID"] = "A";
  env_["AWS_SECRET_ACCESS_KEY"] = "S";
  const std::string m = MessageOf([&] { Resolve(); });
  for (const char* place :
       {"region option", "$AWS_REGION", "$AWS_DEFAULT_REGION", "~/.aws/config [default]"}) {
    EXPECT_NE(m.find(place), std::string::npos) << place << " in " << m;
  }
  // Anonymous reads of a custom endpoint need no region.
  EXPECT_TRUE(Resolve({.anonymous = true, .endpoint = "http://h:1"}).anonymous);
}

TEST_F(CredentialChain, UnknownNamedProfileIsAnError) {
  env_["AWS_REGION"] = "r";
  Write("credentials", "[default]\naws_access_key_id=A\naws_secret_access_key=S\n");
  EXPECT_NE(MessageOf([&] { Resolve({.profile = "nope"}); }).find("'nope'"), std::string::npos);
}

TEST_F(CredentialChain, AnonymousLooksNothingUp) {
  env_["AWS_REGION"] = "r";
  const S3Config c = Resolve({.anonymous = true});
  EXPECT_TRUE(c.anonymous);
  EXPECT_EQ(c.credentials_source, "anonymous");
}

TEST(RetryAfter, SecondsAndDates) {
  EXPECT_EQ(ParseRetryAfter("3", 0), 3.0);
  EXPECT_EQ(ParseRetryAfter(" 0 ", 0), 0.0);
  EXPECT_EQ(ParseRetryAfter("-1", 0), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("1.5", 0), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("", 0), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("soon", 0), std::nullopt);
  // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 30), 30.0);
  EXPECT_EQ(ParseRetryAfter("Sunday, 06-Nov-94 08:49:37 GMT", 784111777 - 5), 5.0);
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 + 100), 0.0);
}

TEST(Backoff, FullJitterWithinExponentialCeilingAndCap) {
  EXPECT_EQ(BackoffDelayS(1, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(BackoffDelayS(1, 0.999999), 0.05 * 0.999999);
  EXPECT_DOUBLE_EQ(BackoffDelayS(3, 0.5), 0.1);  // ceiling 0.2
  EXPECT_DOUBLE_EQ(BackoffDelayS(8, 1.0), 5.0);  // 6.4 capped at 5
  EXPECT_DOUBLE_EQ(BackoffDelayS(1000, 1.0), 5.0);
  for (int retry = 1; retry < 20; ++retry) {
    const double d = BackoffDelayS(retry, 0.7);
    EXPECT_GE(d, 0.0);
    EXPECT_LE(d, 5.0);
  }
}

constexpr const char* kPage =
    R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<Prefix>p/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>
<NextContinuationToken>tok/+=</NextContinuationToken>
<Contents><Key>p/a&amp;b &lt;x&gt; &#233;&#x1F600;</Key><Size>12</Size><ETag>&quot;e1&quot;</ETag></Contents>
<Contents><Key>p/c</Key><LastModified>2020</LastModified><Size>0</Size><ETag>"e2"</ETag><Owner><ID>x</ID></Owner></Contents>
<!-- a comment --></ListBucketResult>)";

TEST(ListObjectsV2, ReadsKeysSizesEtagsAndToken) {
  const ListPage page = ParseListObjectsV2(kPage, "s3://b/p/");
  ASSERT_EQ(page.objects.size(), 2u);
  EXPECT_EQ(page.objects[0].key, "p/a&b <x> \xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(page.objects[0].size, 12u);
  EXPECT_EQ(page.objects[0].etag, "e1");
  EXPECT_EQ(page.objects[1].key, "p/c");
  EXPECT_EQ(page.objects[1].etag, "e2");
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_token, "tok/+=");
}

TEST(ListObjectsV2, DecodesUrlEncodedKeys) {
  const ListPage page = ParseListObjectsV2(
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>p/a+b%2Fc%00</Key><Size>1</Size></Contents></ListBucketResult>",
      "w");
  ASSERT_EQ(page.objects.size(), 1u);
  EXPECT_EQ(page.objects[0].key, std::string("p/a b/c\0", 8));
  EXPECT_FALSE(page.truncated);
}

TEST(ListObjectsV2, EmptyListing) {
  EXPECT_TRUE(ParseListObjectsV2("<ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>", "w")
                  .objects.empty());
  EXPECT_TRUE(ParseListObjectsV2("<ListBucketResult/>", "w").objects.empty());
}

TEST(ListObjectsV2, MalformedAndHostileInputIsCorruptData) {
  const std::vector<std::string> bad = {
      "",
      "not xml",
      "<Error><Code>x</Code></Error>",
      "<ListBucketResult>",
      "<ListBucketResult></Other>",
      "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size></Contents>"
      "</ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>1x</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>&bogus;</Key><Size>1</Size></Contents>"
      "</ListBucketResult>",
      "<ListBucketResult><Contents><Key>&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>&#x110000;</Key><Size>1</Size></Contents>"
      "</ListBucketResult>",
      "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
      "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
      "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult></ListBucketResult>",
      "<ListBucketResult><![CDATA[x]]></ListBucketResult>",
      "<ListBucketResult><a><b><c><d><e><f><g><h><i></i></h></g></f></e></d></c></b></a>"
      "</ListBucketResult>",
      "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>%G1</Key><Size>1"
      "</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents",
      "<ListBucketResult><!-- never closed",
  };
  for (const std::string& xml : bad) {
    const std::string m = MessageOf([&] { ParseListObjectsV2(xml, "s3://bkt/pre/"); });
    EXPECT_NE(m.find("s3://bkt/pre/"), std::string::npos) << xml << " -> " << m;
    EXPECT_EQ(CodeOf([&] { ParseListObjectsV2(xml, "s3://bkt/pre/"); }), ErrorCode::kCorruptData)
        << xml;
  }
}

TEST(ListObjectsV2, BoundsObjectsPerPageAndTextLength) {
  std::string many = "<ListBucketResult>";
  for (size_t i = 0; i <= kMaxListedPerPage; ++i) {
    many += "<Contents><Key>k</Key><Size>1</Size></Contents>";
  }
  many += "</ListBucketResult>";
  EXPECT_EQ(CodeOf([&] { ParseListObjectsV2(many, "w"); }), ErrorCode::kCorruptData);
  const std::string long_text = "<ListBucketResult><Contents><Key>" +
                                std::string(kMaxXmlText + 1, 'k') +
                                "</Key><Size>1</Size></Contents></ListBucketResult>";
  EXPECT_EQ(CodeOf([&] { ParseListObjectsV2(long_text, "w"); }), ErrorCode::kCorruptData);
}

TEST(S3ErrorBody, CodeAndMessage) {
  const std::string body =
      "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The key &amp; more"
      "</Message><Key>k</Key></Error>";
  EXPECT_EQ(XmlElementText(body, "Code"), "NoSuchKey");
  EXPECT_EQ(XmlElementText(body, "Message"), "The key & more");
  EXPECT_EQ(XmlElementText("garbage <<", "Code"), "");
  EXPECT_EQ(UnquoteEtag("W/\"abc\""), "abc");
  EXPECT_EQ(UnquoteEtag(" \"abc\" "), "abc");
  EXPECT_EQ(UnquoteEtag("abc"), "abc");
}

TEST(Coalesce, MergesAdjacentAndOverlappingRangesOnly) {
  char buf[100];
  const std::vector<ReadRange> ranges = {
      {100, buf, 10},  // [100,110)
      {0, buf, 10},    // [0,10)
      {10, buf, 5},    // adjacent to [0,10)
      {12, buf, 8},    // overlaps [10,15)
      {21, buf, 4},    // a gap of one byte: separate
      {105, buf, 2},   // inside [100,110)
      {50, buf, 0},    // empty: left out
  };
  const std::vector<CoalescedRead> reads = CoalesceRanges(ranges);
  ASSERT_EQ(reads.size(), 3u);
  EXPECT_EQ(reads[0].offset, 0u);
  EXPECT_EQ(reads[0].length, 20u);
  EXPECT_EQ(reads[0].members, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(reads[1].offset, 21u);
  EXPECT_EQ(reads[1].length, 4u);
  EXPECT_EQ(reads[2].offset, 100u);
  EXPECT_EQ(reads[2].length, 10u);
  EXPECT_EQ(reads[2].members, (std::vector<size_t>{0, 5}));
  EXPECT_TRUE(CoalesceRanges({}).empty());
}

TEST(Coalesce, ReadsAcrossSmallGapsWithinALengthBound) {
  char buf[100];
  const std::vector<ReadRange> ranges = {
      {0, buf, 10},   // [0,10)
      {30, buf, 10},  // a gap of 20: merged with max_gap 20
      {61, buf, 10},  // a gap of 21: a read of its own
      {75, buf, 10},  // merged into [61,71): [61,85)
      {90, buf, 30},  // would make [61,120): over max_length 50, its own read
  };
  const std::vector<CoalescedRead> reads = CoalesceRanges(ranges, 20, 50);
  ASSERT_EQ(reads.size(), 3u);
  EXPECT_EQ(reads[0].offset, 0u);
  EXPECT_EQ(reads[0].length, 40u);
  EXPECT_EQ(reads[0].members, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(reads[1].offset, 61u);
  EXPECT_EQ(reads[1].length, 24u);
  EXPECT_EQ(reads[2].offset, 90u);
  EXPECT_EQ(reads[2].length, 30u);
}

TEST(RemoteOptionsCheck, RefusesNonsense) {
  EXPECT_EQ(CodeOf([] { RemoteFileSystem::Create({.max_requests = -1}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { RemoteFileSystem::Create({.connect_timeout_s = 0}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { RemoteFileSystem::Create({.max_attempts = 0}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(RemoteFileSystem::Create({.max_requests = 5})->stats().max_requests, 5);
}

}  // namespace
}  // namespace gpufeed::remote
