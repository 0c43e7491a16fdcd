#include "monitor/metrics_http_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr const char* kDefaultHost = "127.0.0.1";
constexpr int kClientTimeoutMs = 2000;
constexpr size_t kMaxRequestBytes = 8192;

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away: nothing to tell it
    sent += static_cast<size_t>(n);
  }
}

std::string Response(const char* status, const char* content_type, const std::string& body) {
  return fmt::format(
      "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      status, content_type, body.size(), body);
}

}  // namespace

void ParseListenAddress(const std::string& address, std::string* host, int* port) {
  std::string port_text;
  if (address.find(':') == std::string::npos) {
    *host = kDefaultHost;
    port_text = address;
  } else if (!address.empty() && address[0] == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("bad Prometheus address '{}': expected [IPV6]:PORT", address));
    }
    *host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    *host = address.substr(0, colon);
    if (host->find(':') != std::string::npos) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("bad Prometheus address '{}': write IPv6 hosts as [HOST]:PORT", address));
    }
    if (host->empty()) *host = kDefaultHost;
    port_text = address.substr(colon + 1);
  }
  const std::optional<int> parsed = ParseNumber<int>(port_text);
  if (parsed) *port = *parsed;
  if (!parsed || *port < 0 || *port > 65535) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("bad Prometheus address '{}': the port must be 0-65535", address));
  }
}

MetricsHttpServer::MetricsHttpServer(const std::string& address,
                                     std::function<std::string()> render)
    : render_(std::move(render)) {
  std::string host;
  int port = 0;
  ParseListenAddress(address, &host, &port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port_text = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("bad Prometheus address '{}': {}", address, gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    // Lets a restarted watch rebind while old connections sit in TIME_WAIT; on Linux it does
    // not allow two live listeners on one port, so "in use" is still reported.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      why = std::strerror(errno);
      close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    throw Error(ErrorCode::kIo,
                fmt::format("cannot serve Prometheus metrics on {}:{}: {}", host, port, why));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  bound_address_ = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port_)
                                                       : fmt::format("{}:{}", host, port_);
  if (pipe2(wake_fds_, O_CLOEXEC) != 0) {
    int err = errno;
    close(listen_fd_);
    throw Error(ErrorCode::kIo, fmt::format("pipe2 failed: {}", std::strerror(err)));
  }
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  char byte = 0;
  while (write(wake_fds_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_fds_[0]);
  close(wake_fds_[1]);
}

void MetricsHttpServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;  // ECONNABORTED, EMFILE, ...: try the next one
    Answer(client);
    close(client);
  }
}

void MetricsHttpServer::Answer(int client) {
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    pollfd fds[2] = {{client, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (poll(fds, 2, kClientTimeoutMs) <= 0 || fds[1].revents != 0) return;
    ssize_t n = recv(client, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
    if (request.size() > kMaxRequestBytes) {
      SendAll(client, Response("431 Request Header Fields Too Large", "text/plain", ""));
      return;
    }
  }
  size_t line_end = request.find_first_of("\r\n");
  std::string line = request.substr(0, line_end);
  if (line.rfind("GET ", 0) != 0 && line.rfind("HEAD ", 0) != 0) {
    SendAll(client, Response("405 Method Not Allowed", "text/plain", "only GET\n"));
    return;
  }
  size_t path_begin = line.find(' ') + 1;
  std::string path = line.substr(path_begin, line.find(' ', path_begin) - path_begin);
  std::string path_only = path.substr(0, path.find('?'));
  if (path_only != "/metrics" && path_only != "/") {
    SendAll(client, Response("404 Not Found", "text/plain", "try /metrics\n"));
    return;
  }
  std::string body = render_();
  if (line.rfind("HEAD ", 0) == 0) {
    std::string head = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body);
    SendAll(client, head.substr(0, head.size() - body.size()));
    return;
  }
  SendAll(client, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body));
}

}  // namespace gpufeed
