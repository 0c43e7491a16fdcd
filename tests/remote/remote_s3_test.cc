// The remote file system against a real S3-API server (s3rver) behind the fault proxy:
// bytes, listings and manifests, retries, resumes, changed objects and every error.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/http_test_server.h"
#include "remote/s3_fixture.h"
#include "remote/s3_suite.h"

namespace gpufeed {
namespace {

using testing::Catch;
using testing::Caught;
using testing::RandomBytes;
using testing::S3Fixture;
using testing::S3Suite;

int64_t Count(const nlohmann::json& counts, const char* group, const char* key) {
  const auto& g = counts[group];
  return g.contains(key) ? g[key].get<int64_t>() : 0;
}

class RemoteS3 : public S3Suite<RemoteS3> {
 public:
  static void Seed(S3Fixture& s3) {
    object_ = RandomBytes(1 << 20, 1);
    s3.Put("data", "train/big.bin", object_);
    s3.Put("data", "train/a b+c.bin", "small object");
    s3.Put("data", "train/sub/c.bin", "c");
    s3.Put("data", "other/x.bin", "x");
  }

 protected:
  static inline std::string object_;
};

TEST_F(RemoteS3, RandomRangesAndReadManyMatchTheLocalBytes) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/train/big.bin");
  ASSERT_EQ(file->Size(), object_.size());
  EXPECT_EQ(file->Map(), nullptr);
  EXPECT_FALSE(file->VersionStamp().empty());
  EXPECT_GT(file->ModificationTimeNs(), 0);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) {
    const size_t n = i % 2 ? rng() % 200 + 1 : rng() % 300000 + 1;
    const uint64_t offset = rng() % object_.size();
    std::string got(n, '\0');
    const size_t read = file->ReadAt(offset, got.data(), n);
    ASSERT_EQ(read, std::min<uint64_t>(n, object_.size() - offset));
    ASSERT_EQ(got.substr(0, read), object_.substr(offset, read)) << offset << "+" << n;
  }
  char byte;
  EXPECT_EQ(file->ReadAt(object_.size(), &byte, 1), 0u);
  std::vector<std::string> bufs;
  std::vector<ReadRange> ranges;
  for (int i = 0; i < 60; ++i) {
    const uint64_t offset = i < 10 ? i * 1000 : rng() % (object_.size() - 70000);
    const size_t n = i < 10 ? 1000 + (i % 3) * 500 : rng() % 70000 + 1;  // some overlap
    bufs.emplace_back(n, '\0');
    ranges.push_back({offset, nullptr, n});
  }
  for (size_t i = 0; i < ranges.size(); ++i) ranges[i].buf = bufs[i].data();
  file->ReadMany(ranges, "ranges");
  for (size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_EQ(bufs[i], object_.substr(ranges[i].offset, ranges[i].n)) << i;
  }
  std::string past(10, '\0');
  const ReadRange beyond{object_.size() - 5, past.data(), 10};
  EXPECT_EQ(Catch([&] { file->ReadMany({&beyond, 1}, "tail"); }).code, ErrorCode::kCorruptData);
}

TEST_F(RemoteS3, SmallReadsShareOneRequestPerPage) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/train/big.bin");
  s3_->ResetProxy();
  for (uint64_t offset = 0; offset < 60000; offset += 8) {
    uint64_t v = 0;
    ASSERT_EQ(file->ReadAt(offset, &v, 8), 8u);
    ASSERT_EQ(std::memcmp(&v, object_.data() + offset, 8), 0);
  }
  EXPECT_EQ(s3_->Counts()["requests"], 1);
}

TEST_F(RemoteS3, KeysWithSpecialBytesRoundTrip) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/train/a b+c.bin");
  std::string got(12, '\0');
  ReadFully(*file, 0, got.data(), got.size(), "object");
  EXPECT_EQ(got, "small object");
}

TEST_F(RemoteS3, OneListingServesTypeListAndOpen) {
  auto fs = RemoteFileSystem::Create(Options());
  const std::vector<DirEntry> entries = fs->List("s3://data/train/");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "a b+c.bin");
  EXPECT_EQ(entries[0].size, 12u);
  EXPECT_EQ(entries[1].name, "big.bin");
  EXPECT_EQ(entries[1].type, PathType::kFile);
  EXPECT_EQ(entries[2].name, "sub");
  EXPECT_EQ(entries[2].type, PathType::kDirectory);
  EXPECT_EQ(fs->Type("s3://data/train/big.bin"), PathType::kFile);
  EXPECT_EQ(fs->Type("s3://data/train/sub"), PathType::kDirectory);
  EXPECT_EQ(fs->Type("s3://data/train"), PathType::kDirectory);
  EXPECT_EQ(fs->Type("s3://data/train/nothing"), PathType::kMissing);
  ASSERT_EQ(fs->List("s3://data/train/sub").size(), 1u);
  auto file = fs->Open("s3://data/train/sub/c.bin");
  EXPECT_EQ(file->Size(), 1u);
  const nlohmann::json counts = s3_->Counts();
  EXPECT_EQ(counts["listings"], 1);
  EXPECT_EQ(Count(counts, "by_method", "HEAD"), 0);
  EXPECT_EQ(fs->stats().listings, 1);
  EXPECT_EQ(Catch([&] { fs->List("s3://data/none/"); }).code, ErrorCode::kNotFound);
  EXPECT_EQ(fs->Type("s3://data/none"), PathType::kMissing);
}

TEST_F(RemoteS3, ManifestFromElsewhereOpensWithoutRequests) {
  auto rank0 = RemoteFileSystem::Create(Options());
  rank0->List("s3://data/train/");
  const std::vector<RemoteObject> manifest = rank0->Manifest();
  ASSERT_EQ(manifest.size(), 3u);
  EXPECT_EQ(manifest[1].uri, "s3://data/train/big.bin");
  EXPECT_EQ(manifest[1].size, object_.size());
  EXPECT_FALSE(manifest[1].etag.empty());
  auto rank1 = RemoteFileSystem::Create(Options());
  rank1->AddManifest("s3://data/train/", manifest);
  s3_->ResetProxy();
  auto file = rank1->Open("s3://data/train/big.bin");
  EXPECT_EQ(file->Size(), object_.size());
  EXPECT_EQ(rank1->List("s3://data/train").size(), 3u);
  EXPECT_EQ(s3_->Counts()["requests"], 0);
  std::string got(100, '\0');
  ReadFully(*file, 5000, got.data(), got.size(), "bytes");
  EXPECT_EQ(got, object_.substr(5000, 100));
  EXPECT_EQ(Catch([&] {
              rank1->AddManifest("s3://data/train/", {{"s3://data/x", 1, "e"}});
            }).code,
            ErrorCode::kInvalidArgument);
}

TEST_F(RemoteS3, ThrottleStormIsRetriedHonouringRetryAfter) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/train/big.bin");
  s3_->SetRules({{"fail_status", 503}, {"fail_count", 3}, {"retry_after", "0"}});
  std::string got(200000, '\0');
  ReadFully(*file, 100, got.data(), got.size(), "bytes");
  EXPECT_EQ(got, object_.substr(100, got.size()));
  RemoteStats stats = fs->stats();
  EXPECT_EQ(stats.retries, 3);
  EXPECT_EQ(stats.throttled, 3);
  EXPECT_EQ(stats.failed, 0);
  // Retry-After: 1 holds the next try back at least that long.
  s3_->SetRules({{"fail_status", 429}, {"fail_count", 1}, {"retry_after", "1"}});
  const auto start = std::chrono::steady_clock::now();
  ReadFully(*file, 300000, got.data(), got.size(), "bytes");
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.99);
  EXPECT_EQ(got, object_.substr(300000, got.size()));
  EXPECT_EQ(fs->stats().throttled, 4);
}

TEST_F(RemoteS3, RetryAfterBeyondTheBudgetFailsNamingTheRange) {
  RemoteOptions o = Options();
  o.retry_budget_s = 2;
  auto fs = RemoteFileSystem::Create(o);
  auto file = fs->Open("s3://data/train/big.bin");
  s3_->SetRules({{"fail_status", 503}, {"fail_count", 100}, {"retry_after", "3600"}});
  std::string got(100000, '\0');
  const Caught c = Catch([&] { file->ReadAt(1000, got.data(), got.size()); });
  EXPECT_EQ(c.code, ErrorCode::kIo);
  EXPECT_NE(c.message.find("s3://data/train/big.bin bytes 1000-100999"), std::string::npos)
      << c.message;
  EXPECT_NE(c.message.find("HTTP 503"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("Retry-After"), std::string::npos) << c.message;
  EXPECT_EQ(fs->stats().failed, 1);
}

TEST_F(RemoteS3, BodyCutMidTransferResumesWithTheRestOnly) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/train/big.bin");
  s3_->ResetProxy();
  s3_->SetRules({{"reset_after_bytes", 300000}, {"reset_count", 1}});
  std::string got(object_.size() - 1000, '\0');
  ReadFully(*file, 1000, got.data(), got.size(), "bytes");
  EXPECT_EQ(got, object_.substr(1000));
  const nlohmann::json counts = s3_->Counts();
  EXPECT_EQ(counts["ranged"], 2);
  // 300000 bytes before the cut, the rest after: nothing was asked twice.
  EXPECT_EQ(counts["bytes"], got.size());
  EXPECT_EQ(fs->stats().retries, 1);
}

TEST_F(RemoteS3, ObjectChangedBetweenReadsIsCorruptData) {
  s3_->Put("data", "changing/obj.bin", RandomBytes(300000, 2));
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/changing/obj.bin");
  std::string got(100000, '\0');
  ReadFully(*file, 0, got.data(), got.size(), "bytes");
  s3_->Put("data", "changing/obj.bin", RandomBytes(300000, 3));
  const Caught c = Catch([&] { file->ReadAt(150000, got.data(), got.size()); });
  EXPECT_EQ(c.code, ErrorCode::kCorruptData);
  EXPECT_NE(c.message.find("s3://data/changing/obj.bin changed during the job (ETag \""),
            std::string::npos)
      << c.message;
}

TEST_F(RemoteS3, ErrorsNameWhatWentWrong) {
  auto fs = RemoteFileSystem::Create(Options());
  Caught c = Catch([&] { fs->Open("s3://data/train/missing.bin"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  for (const char* part : {"NoSuchKey", "bucket 'data'", "key 'train/missing.bin'",
                           s3_->endpoint().c_str(), "credentials from environment"}) {
    EXPECT_NE(c.message.find(part), std::string::npos) << part << " in " << c.message;
  }
  c = Catch([&] { fs->Open("s3://no-such-bucket/k"); });
  EXPECT_EQ(c.code, ErrorCode::kNotFound);
  EXPECT_NE(c.message.find("NoSuchBucket"), std::string::npos) << c.message;
  setenv("AWS_ACCESS_KEY_ID", "WRONGKEY", 1);
  auto wrong = RemoteFileSystem::Create(Options());
  c = Catch([&] { wrong->Open("s3://data/train/big.bin"); });  // credentials looked up here
  setenv("AWS_ACCESS_KEY_ID", s3_->access_key().c_str(), 1);
  EXPECT_EQ(c.code, ErrorCode::kPermissionDenied);
  EXPECT_NE(c.message.find("InvalidAccessKeyId"), std::string::npos) << c.message;
  // A store that refuses access (s3rver does not check signatures, so a 403 is injected).
  s3_->SetRules({{"fail_status", 403}, {"fail_count", 2}});
  c = Catch([&] { fs->Open("s3://data/train/big.bin"); });
  EXPECT_EQ(c.code, ErrorCode::kPermissionDenied);
  EXPECT_NE(c.message.find("AccessDenied"), std::string::npos) << c.message;
  EXPECT_EQ(fs->Type("s3://data/train/big.bin"), PathType::kFile);
}

TEST_F(RemoteS3, UnreachableEndpointIsIoWithinTheRetryBounds) {
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(sock);  // nothing listens on this port now
  RemoteOptions o = Options();
  o.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  o.max_attempts = 3;
  auto fs = RemoteFileSystem::Create(o);
  const auto start = std::chrono::steady_clock::now();
  const Caught c = Catch([&] { fs->Open("s3://data/train/big.bin"); });
  EXPECT_EQ(c.code, ErrorCode::kIo);
  EXPECT_NE(c.message.find("3 attempts"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find(o.endpoint), std::string::npos) << c.message;
  // Backoff of at most 0.05 + 0.1 s between refused connections.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

TEST_F(RemoteS3, ManyThreadsStayWithinTheRequestCap) {
  RemoteOptions o = Options();
  o.max_requests = 3;
  auto fs = RemoteFileSystem::Create(o);
  auto file = fs->Open("s3://data/train/big.bin");
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::string> bufs(8, std::string(20000, '\0'));
      std::vector<ReadRange> ranges;
      for (int i = 0; i < 8; ++i)
        ranges.push_back({uint64_t(t * 200000 + i * 25000), bufs[i].data(), 20000});
      file->ReadMany(ranges, "ranges");
      for (int i = 0; i < 8; ++i) {
        if (bufs[i] != object_.substr(ranges[i].offset, 20000)) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  const RemoteStats stats = fs->stats();
  EXPECT_LE(stats.max_in_flight, 3);
  EXPECT_GE(stats.max_in_flight, 1);
  EXPECT_EQ(stats.max_requests, 3);
  EXPECT_GT(stats.latency_mean_s, 0);
  EXPECT_GE(stats.latency_p99_s, stats.latency_mean_s * 0.5);
  // Each thread's ranges lie 5,000 bytes apart: one GET per thread reads across the gaps.
  EXPECT_EQ(stats.bytes, 4 * (7 * 25000 + 20000));
}

TEST_F(RemoteS3, BatchesOfWholeObjectsReuseTheirConnections) {
  // As an image worker reads its batches: 24 objects, read whole 10 times, 8 at a time. Left
  // to libcurl's default, the connection cache shrinks as a batch's last transfers finish,
  // and each batch connected again (over TLS, a handshake each).
  RemoteOptions o = Options();
  o.max_requests = 8;
  auto fs = RemoteFileSystem::Create(o);
  std::vector<std::string> bodies;
  std::vector<std::unique_ptr<File>> files;
  for (int i = 0; i < 24; ++i) {
    bodies.push_back(RandomBytes(3000 + 100 * i, 40 + i));
    const std::string key = "batches/" + std::to_string(i) + ".bin";
    s3_->Put("data", key, bodies.back());
    files.push_back(fs->Open("s3://data/" + key));
  }
  s3_->ResetProxy();
  for (int round = 0; round < 10; ++round) {
    std::vector<std::string> got;
    for (const auto& body : bodies) got.emplace_back(body.size(), '\0');
    std::vector<FileRead> reads;
    for (size_t i = 0; i < files.size(); ++i) {
      reads.push_back({files[i].get(), 0, got[i].data(), got[i].size()});
    }
    ReadFiles(reads, "object");
    EXPECT_EQ(got, bodies) << "round " << round;
  }
  const nlohmann::json counts = s3_->Counts();
  EXPECT_EQ(Count(counts, "by_method", "GET"), 240);
  // The cap's connections, and the one that asked for the counts.
  EXPECT_LE(counts["connections"].get<int64_t>(), 8 + 1);
}

TEST_F(RemoteS3, ThreadsWaitingForSlotsOthersHoldAllFinishWithTheirBytes) {
  // Ranges too far apart to share a GET: each thread has several requests, more than the cap,
  // so threads with requests in flight wait for slots the other threads free.
  RemoteOptions o = Options();
  o.max_requests = 2;
  auto fs = RemoteFileSystem::Create(o);
  auto file = fs->Open("s3://data/train/big.bin");
  constexpr int kThreads = 4;
  constexpr int kRanges = 4;
  constexpr uint64_t kApart = 270000;  // more than the gap ReadMany reads across
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        std::vector<std::string> bufs(kRanges, std::string(1000 + t, '\0'));
        std::vector<ReadRange> ranges;
        for (int i = 0; i < kRanges; ++i) {
          ranges.push_back({i * kApart + uint64_t(t * 7 + round), bufs[i].data(), bufs[i].size()});
        }
        file->ReadMany(ranges, "ranges");
        for (int i = 0; i < kRanges; ++i) {
          if (bufs[i] != object_.substr(ranges[i].offset, bufs[i].size())) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  const RemoteStats stats = fs->stats();
  EXPECT_LE(stats.max_in_flight, 2);
  EXPECT_GE(stats.requests, kThreads * kRanges * 3);  // none shared a GET
}

TEST_F(RemoteS3, HttpUrlsReadWithRangesAndHaveNoFolders) {
  // s3rver serves objects to unsigned GETs: a plain HTTP server that honours Range.
  auto fs = RemoteFileSystem::Create(Options());
  const std::string url = s3_->endpoint() + "/data/train/big.bin";
  EXPECT_EQ(fs->Type(url), PathType::kFile);
  auto file = fs->Open(url);
  ASSERT_EQ(file->Size(), object_.size());
  std::string got(150000, '\0');
  ReadFully(*file, 777, got.data(), got.size(), "bytes");
  EXPECT_EQ(got, object_.substr(777, got.size()));
  EXPECT_EQ(fs->Type(s3_->endpoint() + "/data/train/none.bin"), PathType::kMissing);
  EXPECT_EQ(Catch([&] { fs->List(s3_->endpoint() + "/data/train/"); }).code,
            ErrorCode::kUnsupported);
  EXPECT_EQ(Catch([&] { fs->Open(s3_->endpoint() + "/data/train/none.bin"); }).code,
            ErrorCode::kNotFound);
}

TEST_F(RemoteS3, ServerIgnoringRangeIsAnErrorUnlessTheWholeFileIsAsked) {
  // Every GET gets the whole body and 200, as from a server that ignores Range.
  const std::string body = RandomBytes(200000, 4);
  testing::HttpTestServer server([&](const std::string& request) {
    std::string reply =
        "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nConnection: close\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n";
    if (!request.starts_with("HEAD")) reply += body;
    return reply;
  });
  const std::string url = server.endpoint() + "/file.bin";
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open(url);
  ASSERT_EQ(file->Size(), body.size());
  std::string got(body.size(), '\0');
  ReadFully(*file, 0, got.data(), got.size(), "whole");
  EXPECT_EQ(got, body);
  const Caught c = Catch([&] { file->ReadAt(70000, got.data(), 100000); });
  EXPECT_EQ(c.code, ErrorCode::kUnsupported);
  EXPECT_NE(c.message.find(url + " bytes 70000-169999"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("ignores Range"), std::string::npos) << c.message;
}

TEST_F(RemoteS3, DefaultFileSystemSendsUrisToTheRemoteOne) {
  SetDefaultRemoteOptions(Options());
  auto file = DefaultFileSystem()->Open("s3://data/other/x.bin");
  char c = 0;
  ASSERT_EQ(file->ReadAt(0, &c, 1), 1u);
  EXPECT_EQ(c, 'x');
  EXPECT_EQ(DefaultFileSystem()->Type("/proc/self/status"), PathType::kFile);
  EXPECT_EQ(DefaultRemoteFileSystem()->Manifest().size(), 1u);
}

}  // namespace
}  // namespace gpufeed
