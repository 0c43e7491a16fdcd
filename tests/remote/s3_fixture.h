// S3Fixture: an S3-API server (s3rver) behind a fault proxy on 127.0.0.1, for C++ tests.
//
// It runs tests/remote/s3_server.py in its CLI mode (found through $GPUFEED_SOURCE_DIR, else
// the GPUFEED_SOURCE_DIR compile definition), reads the endpoint it prints, and stops it in
// the destructor. Clients under test talk to endpoint() (the proxy); Put() and
// CreateBucket() write to direct_endpoint() so seeding data never meets injected faults.
// One thread at a time.
//
//   if (auto why = S3Fixture::UnavailableReason(); !why.empty()) GTEST_SKIP() << why;
//   S3Fixture s3({"--bucket", "data"});
//   s3.Put("data", "train/x.bin", bytes);
//   s3.SetRules({{"fail_status", 503}, {"fail_count", 2}, {"retry_after", "1"}});
//   ... read s3://data/train/x.bin through s3.endpoint() ...
//   EXPECT_EQ(s3.Counts()["by_status"]["503"], 2);
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace gpufeed::testing {

class S3Fixture {
 public:
  struct HttpResponse {
    int status = 0;
    std::string body;
  };

  // Empty when the double can run here; otherwise why not (node or the npm packages missing,
  // no source folder), for GTEST_SKIP().
  static std::string UnavailableReason() {
    const std::string source = SourceDir();
    if (source.empty()) return "GPUFEED_SOURCE_DIR is not set";
    if (!IsFile(source + "/tests/remote/s3_server.py")) {
      return source + "/tests/remote/s3_server.py is missing";
    }
    if (!OnPath("node")) return "node is not installed (scripts/setup installs it)";
    if (!IsFile(source + "/tests/remote/server/node_modules/s3rver/package.json")) {
      return source + "/tests/remote/server/node_modules is missing: run scripts/setup";
    }
    return "";
  }

  // `args` go to the launcher: {"--bucket", "NAME"}, {"--upload", "DIR=BUCKET/PREFIX"}.
  explicit S3Fixture(const std::vector<std::string>& args = {}) {
    const std::string why = UnavailableReason();
    if (!why.empty()) throw std::runtime_error("S3Fixture: " + why);
    Spawn(args);
    try {
      const nlohmann::json info = nlohmann::json::parse(ReadLine(std::chrono::seconds(60)));
      endpoint_ = info.at("endpoint").get<std::string>();
      direct_endpoint_ = info.at("direct_endpoint").get<std::string>();
      access_key_ = info.at("access_key").get<std::string>();
      secret_key_ = info.at("secret_key").get<std::string>();
      region_ = info.at("region").get<std::string>();
    } catch (...) {
      Stop();
      throw;
    }
  }

  ~S3Fixture() { Stop(); }
  S3Fixture(const S3Fixture&) = delete;
  S3Fixture& operator=(const S3Fixture&) = delete;

  const std::string& endpoint() const { return endpoint_; }  // the proxy: clients use this
  const std::string& direct_endpoint() const { return direct_endpoint_; }
  const std::string& access_key() const { return access_key_; }
  const std::string& secret_key() const { return secret_key_; }
  const std::string& region() const { return region_; }

  // Replaces the proxy's rules; see tests/remote/server/fault_proxy.js for the fields.
  nlohmann::json SetRules(const nlohmann::json& rules) {
    return Control("POST", "/__proxy/rules", rules.dump());
  }
  nlohmann::json Counts() { return Control("GET", "/__proxy/counts", ""); }
  // The last answers (method, path, status, request_id, host_id), oldest first.
  nlohmann::json Answers() { return Control("GET", "/__proxy/answers", ""); }
  void ResetProxy() { Control("POST", "/__proxy/reset", "{}"); }

  void CreateBucket(const std::string& bucket) {
    Expect200(Http(direct_endpoint_, "PUT", "/" + bucket, ""), "create bucket " + bucket);
  }

  // Writes (or replaces) one object; the next read through endpoint() sees the new body.
  void Put(const std::string& bucket, const std::string& key, std::string_view bytes) {
    Expect200(Http(direct_endpoint_, "PUT", "/" + bucket + "/" + EncodeKey(key), bytes),
              "put " + bucket + "/" + key);
  }

  // One HTTP/1.1 exchange (Connection: close) with an http://127.0.0.1:PORT endpoint, no
  // Authorization: s3rver serves and stores anonymous requests.
  static HttpResponse Http(const std::string& endpoint, const std::string& method,
                           const std::string& path, std::string_view body) {
    const int port = PortOf(endpoint);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("S3Fixture: socket: " + std::string(strerror(errno)));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const std::string err = strerror(errno);
      ::close(fd);
      throw std::runtime_error("S3Fixture: connect to " + endpoint + ": " + err);
    }
    std::string request =
        method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
        "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    request.append(body);
    std::string reply;
    const bool ok = SendAll(fd, request) && ReceiveAll(fd, &reply);
    ::close(fd);
    if (!ok) throw std::runtime_error("S3Fixture: " + method + " " + endpoint + path + " failed");
    return ParseResponse(reply, method + " " + path);
  }

 private:
  static std::string SourceDir() {
    if (const char* env = std::getenv("GPUFEED_SOURCE_DIR"); env != nullptr && *env != '\0') {
      return env;
    }
#ifdef GPUFEED_SOURCE_DIR
    return GPUFEED_SOURCE_DIR;
#else
    return "";
#endif
  }

  static bool IsFile(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }

  static bool OnPath(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
    while (!dirs.empty()) {
      const size_t colon = dirs.find(':');
      const std::string dir(dirs.substr(0, colon));
      if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
      if (colon == std::string_view::npos) break;
      dirs.remove_prefix(colon + 1);
    }
    return false;
  }

  void Spawn(const std::vector<std::string>& args) {
    int to_child[2];
    int from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0) throw std::runtime_error("S3Fixture: pipe failed");
    if (::pipe2(from_child, O_CLOEXEC) != 0) {
      ::close(to_child[0]);
      ::close(to_child[1]);
      throw std::runtime_error("S3Fixture: pipe failed");
    }
    std::vector<std::string> argv_storage = {"/usr/bin/python3",
                                             SourceDir() + "/tests/remote/s3_server.py"};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // dup2 clears close-on-exec on the child's copies; every other descriptor stays shut.
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    stdout_ = from_child[0];
    if (rc != 0) {
      pid_ = -1;
      Stop();
      throw std::runtime_error("S3Fixture: cannot run /usr/bin/python3: " +
                               std::string(strerror(rc)));
    }
  }

  std::string ReadLine(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string line;
    while (line.empty() || line.back() != '\n') {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd pfd{stdout_, POLLIN, 0};
      const int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) throw std::runtime_error("S3Fixture: the S3 server did not start in time");
      char buf[4096];
      const ssize_t n = ::read(stdout_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw std::runtime_error(
            "S3Fixture: the S3 server exited before it started "
            "(its errors are on stderr)");
      }
      line.append(buf, static_cast<size_t>(n));
    }
    return line;
  }

  // Closing stdin asks the launcher to stop; it is killed if it has not within 5 s.
  void Stop() noexcept {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
    if (pid_ > 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      int status = 0;
      pid_t done = 0;
      while ((done = ::waitpid(pid_, &status, WNOHANG)) == 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (done == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
      pid_ = -1;
    }
    if (stdout_ >= 0) ::close(stdout_);
    stdout_ = -1;
  }

  nlohmann::json Control(const std::string& method, const std::string& path,
                         const std::string& body) {
    const HttpResponse r = Http(endpoint_, method, path, body);
    Expect200(r, method + " " + path);
    return nlohmann::json::parse(r.body.empty() ? "{}" : r.body);
  }

  static void Expect200(const HttpResponse& r, const std::string& what) {
    if (r.status != 200) {
      throw std::runtime_error("S3Fixture: " + what + ": HTTP " + std::to_string(r.status) + ": " +
                               r.body);
    }
  }

  static int PortOf(const std::string& endpoint) {
    const size_t colon = endpoint.rfind(':');
    if (endpoint.rfind("http://127.0.0.1:", 0) != 0 || colon == std::string::npos) {
      throw std::runtime_error("S3Fixture: not a local endpoint: " + endpoint);
    }
    return std::stoi(endpoint.substr(colon + 1));
  }

  // Percent-encodes everything but RFC 3986's unreserved characters and '/'.
  static std::string EncodeKey(const std::string& key) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : key) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
        out.push_back(static_cast<char>(c));
      } else {
        out += {'%', kHex[c >> 4], kHex[c & 15]};
      }
    }
    return out;
  }

  static bool SendAll(int fd, std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  static bool ReceiveAll(int fd, std::string* out) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      if (n == 0) return true;
      out->append(buf, static_cast<size_t>(n));
    }
  }

  // The whole reply of a Connection: close exchange; its body ends where the stream does
  // unless it is chunked.
  static HttpResponse ParseResponse(const std::string& reply, const std::string& what) {
    const size_t head_end = reply.find("\r\n\r\n");
    if (reply.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) {
      throw std::runtime_error("S3Fixture: " + what + ": not an HTTP response");
    }
    HttpResponse r;
    r.status = std::atoi(reply.c_str() + 9);
    r.body = reply.substr(head_end + 4);
    std::string head = reply.substr(0, head_end);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      r.body = Dechunk(r.body, what);
    }
    return r;
  }

  static std::string Dechunk(const std::string& chunked, const std::string& what) {
    std::string out;
    size_t pos = 0;
    for (;;) {
      const size_t line_end = chunked.find("\r\n", pos);
      if (line_end == std::string::npos) {
        throw std::runtime_error("S3Fixture: " + what + ": truncated chunked body");
      }
      const size_t size = std::stoul(chunked.substr(pos, line_end - pos), nullptr, 16);
      if (size == 0) return out;
      if (line_end + 2 + size > chunked.size()) {
        throw std::runtime_error("S3Fixture: " + what + ": truncated chunked body");
      }
      out.append(chunked, line_end + 2, size);
      pos = line_end + 2 + size + 2;
    }
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string endpoint_;
  std::string direct_endpoint_;
  std::string access_key_;
  std::string secret_key_;
  std::string region_;
};

}  // namespace gpufeed::testing
