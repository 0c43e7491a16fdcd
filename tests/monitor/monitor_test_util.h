// Helpers shared by the monitor tests: a temporary folder and a manual clock.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace gpufeed::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gpufeed-monitor-XXXXXX");
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string path = File(name);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A clock that moves only when told: the rules see exact times.
class ManualClock {
 public:
  std::chrono::steady_clock::time_point Now() const { return *now_; }
  void Advance(std::chrono::milliseconds by) { *now_ += by; }
  std::function<std::chrono::steady_clock::time_point()> AsFunction() const {
    auto now = now_;
    return [now] { return *now; };
  }

 private:
  std::shared_ptr<std::chrono::steady_clock::time_point> now_ =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::seconds(1000));
};

}  // namespace gpufeed::testing

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace gpufeed::testing {

// GET `path` from 127.0.0.1:`port`; the whole response (status line, headers, body), or ""
// when the connection fails.
inline std::string HttpGet(int port, const std::string& path = "/metrics") {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    close(fd);
    return "";
  }
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  close(fd);
  return response;
}

inline std::string HttpBody(const std::string& response) {
  size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

}  // namespace gpufeed::testing
