// ReadFiles over remote objects: each object handed over as it arrives while the others are
// still in flight, and a failed object raised naming it after the others were handed over.
// Against HttpTestServer, which holds an answer back for as long as a test says.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/http_test_server.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using testing::RandomBytes;

// A server that answers GETs of `bodies` with 200 and the whole object (as to a ranged GET of
// all of it), HEADs with its size, and GETs of forbidden.bin with 403; `hold(path)` runs
// before a GET is answered.
testing::HttpTestServer::Handler ObjectServer(const std::map<std::string, std::string>& bodies,
                                              std::function<void(const std::string&)> hold) {
  return [&bodies, hold](const std::string& request) {
    const size_t begin = request.find(' ') + 1;
    const std::string path = request.substr(begin, request.find(' ', begin) - begin);
    const std::string& body = bodies.at(path);
    const bool get = request.starts_with("GET");
    if (get) hold(path);
    if (get && path == "/forbidden.bin") {
      return std::string(
          "HTTP/1.1 403 Forbidden\r\nConnection: close\r\n"
          "Content-Length: 0\r\n\r\n");
    }
    return "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + (get ? body : "");
  };
}

TEST(RemoteReadFiles, EachObjectIsHandedOverWhileTheOthersAreStillInFlight) {
  // late.bin's answer is held back until early.bin has been handed over: a batch read that
  // handed its objects over only once all had arrived would hand early.bin over last.
  const std::map<std::string, std::string> bodies = {{"/late.bin", RandomBytes(6000, 8)},
                                                     {"/early.bin", RandomBytes(5000, 7)}};
  std::mutex mu;
  std::condition_variable cv;
  bool early_handed = false;
  bool late_held_until_then = false;
  testing::HttpTestServer server(ObjectServer(bodies, [&](const std::string& path) {
    if (path != "/late.bin") return;
    std::unique_lock lock(mu);
    // The bound only ends a failing run; a passing one waits for early.bin alone.
    late_held_until_then =
        cv.wait_for(lock, std::chrono::seconds(20), [&] { return early_handed; });
  }));
  RemoteOptions o;
  o.read_timeout_s = 60;
  auto fs = RemoteFileSystem::Create(o);
  const auto late = fs->Open(server.endpoint() + "/late.bin");
  const auto early = fs->Open(server.endpoint() + "/early.bin");
  std::vector<std::string> got = {std::string(late->Size(), '\0'),
                                  std::string(early->Size(), '\0')};
  const std::vector<FileRead> reads = {{late.get(), 0, got[0].data(), got[0].size()},
                                       {early.get(), 0, got[1].data(), got[1].size()}};
  std::vector<size_t> handed;
  ReadFiles(reads, "object", [&](size_t i) {
    handed.push_back(i);
    EXPECT_EQ(got[i], bodies.at(i == 0 ? "/late.bin" : "/early.bin"));
    if (i == 1) {
      std::lock_guard lock(mu);
      early_handed = true;
      cv.notify_all();
    }
  });
  EXPECT_EQ(handed, (std::vector<size_t>{1, 0}));
  EXPECT_TRUE(late_held_until_then);
}

TEST(RemoteReadFiles, AFailedObjectIsRaisedNamingItAfterTheOthersWereHandedOver) {
  const std::map<std::string, std::string> bodies = {
      {"/a.bin", RandomBytes(3000, 9)}, {"/forbidden.bin", "x"}, {"/b.bin", RandomBytes(4000, 10)}};
  testing::HttpTestServer server(ObjectServer(bodies, [](const std::string&) {}));
  RemoteOptions o;
  o.max_attempts = 2;
  auto fs = RemoteFileSystem::Create(o);
  std::vector<std::unique_ptr<File>> files;
  std::vector<std::string> got;
  for (const char* name : {"/a.bin", "/forbidden.bin", "/b.bin"}) {
    files.push_back(fs->Open(server.endpoint() + name));
    got.emplace_back(files.back()->Size(), '\0');
  }
  std::vector<FileRead> reads;
  for (size_t i = 0; i < files.size(); ++i) {
    reads.push_back({files[i].get(), 0, got[i].data(), got[i].size()});
  }
  std::vector<size_t> handed;
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ReadFiles(reads, "object", [&](size_t i) { handed.push_back(i); }); },
                        &message),
            ErrorCode::kPermissionDenied);
  EXPECT_NE(message.find(server.endpoint() + "/forbidden.bin"), std::string::npos) << message;
  std::sort(handed.begin(), handed.end());
  EXPECT_EQ(handed, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(got[0], bodies.at("/a.bin"));
  EXPECT_EQ(got[2], bodies.at("/b.bin"));
}

}  // namespace
}  // namespace gpufeed
