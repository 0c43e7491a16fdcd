// MetricsHttpServer: a minimal HTTP/1.0 server for GET /metrics, on plain POSIX sockets.
//
// One thread accepts and answers one connection at a time (a scrape is a few KB every few
// seconds, so there is nothing to parallelize); a client that sends nothing for 2 s is
// dropped so it cannot hold the thread. The listening socket is bound in the constructor,
// so a bad or busy address is an error the caller sees at once, before anything starts.
// Thread-safety: construct and destroy on one thread; `render` is called on the server
// thread and must be thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace gpufeed {

class MetricsHttpServer {
 public:
  // `address`: "PORT", "HOST:PORT" or "[V6]:PORT"; HOST defaults to 127.0.0.1, port 0 picks
  // a free one. Throws Error(kInvalidArgument) for a malformed address and Error(kIo) naming
  // the address when it cannot be bound (in use, not local, no permission).
  MetricsHttpServer(const std::string& address, std::function<std::string()> render);
  ~MetricsHttpServer();  // Stops and joins the thread.

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:9400" as bound.
  const std::string& address() const { return bound_address_; }

 private:
  void Serve();
  void Answer(int client);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: the destructor writes to end poll()
  int port_ = 0;
  std::string bound_address_;
  std::thread thread_;
};

// Splits "HOST:PORT" (HOST may be empty or a bracketed IPv6 literal; a bare "PORT" means
// the loopback host). Throws Error(kInvalidArgument) naming the address.
void ParseListenAddress(const std::string& address, std::string* host, int* port);

}  // namespace gpufeed
