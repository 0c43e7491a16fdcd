// Every answer a remote read takes is checked against what was asked, before any byte reaches
// libhdf5 or a decoder: a 206 for another range, an object whose ETag changed, a body that
// ends short on every try, and a store that answers 503 to the end. Each ends in the error it
// is (IoError naming the object, the range, the attempts and the last status or transport
// error; CorruptData only for an object that changed), never in wrong bytes handed on.
// Against HttpTestServer, whose handler writes each answer whole.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/http_test_server.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using testing::RandomBytes;

const std::string& Body() {
  static const std::string body = RandomBytes(300000, 11);
  return body;
}

// The first and last byte of the request's "Range: bytes=A-B".
std::pair<uint64_t, uint64_t> RangeOf(const std::string& request) {
  const size_t at = request.find("Range: bytes=") + 13;
  const size_t dash = request.find('-', at);
  return {std::stoull(request.substr(at, dash - at)),
          std::stoull(request.substr(dash + 1, request.find("\r\n", dash) - dash - 1))};
}

// A HEAD answer for Body() with ETag "v1", or a 206 built by `answer(first, last)`.
testing::HttpTestServer::Handler Server(
    std::function<std::string(uint64_t first, uint64_t last)> answer) {
  return [answer](const std::string& request) {
    if (request.starts_with("HEAD")) {
      return "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nConnection: close\r\nContent-Length: " +
             std::to_string(Body().size()) + "\r\n\r\n";
    }
    const auto [first, last] = RangeOf(request);
    return answer(first, last);
  };
}

std::string Partial(uint64_t first, uint64_t last, const std::string& etag = "v1",
                    size_t cut = std::string::npos) {
  const std::string bytes = Body().substr(first, last - first + 1);
  return "HTTP/1.1 206 Partial Content\r\nETag: \"" + etag +
         "\"\r\nConnection: close\r\nContent-Range: bytes " + std::to_string(first) + "-" +
         std::to_string(last) + "/" + std::to_string(Body().size()) +
         "\r\nContent-Length: " + std::to_string(bytes.size()) + "\r\n\r\n" +
         bytes.substr(0, cut);
}

RemoteOptions Options() {
  RemoteOptions o;
  o.max_attempts = 3;
  o.retry_budget_s = 20;
  o.connect_timeout_s = 5;
  o.read_timeout_s = 5;
  return o;
}

// Reads 100,000 bytes at 70,000 and returns the error's code and message.
ErrorCode ReadWhole(const testing::HttpTestServer& server, std::string* message) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open(server.endpoint() + "/obj.bin");
  std::string got(100000, '\0');
  return ErrorCodeOf([&] { ReadFully(*file, 70000, got.data(), got.size(), "bytes"); }, message);
}

TEST(RemoteAnswers, A206ForAnotherRangeIsRefusedNamingBoth) {
  testing::HttpTestServer server(
      Server([](uint64_t first, uint64_t last) { return Partial(first + 1, last + 1); }));
  std::string message;
  EXPECT_EQ(ReadWhole(server, &message), ErrorCode::kIo);
  EXPECT_NE(message.find("/obj.bin bytes 70000-169999"), std::string::npos) << message;
  EXPECT_NE(message.find("Content-Range 'bytes 70001-170000/300000'"), std::string::npos)
      << message;
}

TEST(RemoteAnswers, AnObjectWhoseEtagChangedIsCorruptDataNamingBothVersions) {
  testing::HttpTestServer server(
      Server([](uint64_t first, uint64_t last) { return Partial(first, last, "v2"); }));
  std::string message;
  EXPECT_EQ(ReadWhole(server, &message), ErrorCode::kCorruptData);
  EXPECT_NE(message.find("changed during the job"), std::string::npos) << message;
  EXPECT_NE(message.find("\"v1\""), std::string::npos) << message;
  EXPECT_NE(message.find("v2"), std::string::npos) << message;
}

TEST(RemoteAnswers, ABodyShortOnEveryTryIsAnIoErrorNamingRangeAndAttempts) {
  // Each answer promises its whole range and sends 1,000 bytes of it: the client resumes from
  // where each ended, and gives up after its attempts, never handing on a short read.
  std::atomic<int> gets{0};
  testing::HttpTestServer server(Server([&](uint64_t first, uint64_t last) {
    ++gets;
    return Partial(first, last, "v1", 1000);
  }));
  std::string message;
  EXPECT_EQ(ReadWhole(server, &message), ErrorCode::kIo);
  EXPECT_EQ(gets.load(), 3);
  EXPECT_NE(message.find("/obj.bin bytes 70000-169999"), std::string::npos) << message;
  EXPECT_NE(message.find("3 attempts"), std::string::npos) << message;
}

TEST(RemoteAnswers, A503ToTheEndIsAnIoErrorNamingRangeAttemptsAndStatus) {
  testing::HttpTestServer server(Server([](uint64_t, uint64_t) {
    return std::string(
        "HTTP/1.1 503 Slow Down\r\nRetry-After: 0\r\nConnection: close\r\n"
        "Content-Length: 0\r\n\r\n");
  }));
  std::string message;
  EXPECT_EQ(ReadWhole(server, &message), ErrorCode::kIo);
  EXPECT_NE(message.find("/obj.bin bytes 70000-169999"), std::string::npos) << message;
  EXPECT_NE(message.find("HTTP 503"), std::string::npos) << message;
  EXPECT_NE(message.find("3 attempts"), std::string::npos) << message;
}

}  // namespace
}  // namespace gpufeed
