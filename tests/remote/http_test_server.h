// An HTTP/1.1 server on 127.0.0.1 for remote tests: each connection carries one request,
// whose head the handler turns into the whole reply (Connection: close). Each connection is
// served on a thread of its own, so a handler may hold one reply back while others are
// answered. It records every request head. The destructor stops it and joins its threads.
// Thread-safety: requests() may be called from any thread; the handler is called from many
// threads at once.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpufeed::testing {

// `n` bytes drawn from `seed`: a body whose every byte a test can check.
inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class HttpTestServer {
 public:
  using Handler = std::function<std::string(const std::string& request_head)>;

  explicit HttpTestServer(Handler handler) : handler_(std::move(handler)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HttpTestServer() {
    ::shutdown(listen_, SHUT_RDWR);
    ::close(listen_);
    thread_.join();
  }
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    for (;;) {
      const int fd = ::accept(listen_, nullptr, nullptr);
      if (fd < 0) break;
      connections_.emplace_back([this, fd] { Answer(fd); });
    }
    for (std::thread& t : connections_) t.join();
  }

  void Answer(int fd) {
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    request = request.substr(0, request.find("\r\n\r\n") + 2);
    {
      std::lock_guard lock(mu_);
      requests_.push_back(request);
    }
    const std::string reply = handler_(request);
    ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    ::close(fd);
  }

  Handler handler_;
  int listen_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::vector<std::thread> connections_;  // only the serving thread touches it
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

}  // namespace gpufeed::testing
