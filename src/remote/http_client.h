// The HTTP client under the remote file system: libcurl, many requests in flight at once
// through one multi handle per thread, at most `max_requests` per host in this client,
// retries with backoff and Retry-After, and bodies cut mid-transfer resumed from the bytes
// already received.
//
// Each thread keeps its multi handle (whose connection cache keeps up to max_requests idle
// connections alive across calls) and its easy handles; the DNS cache and TLS sessions are
// shared by every thread through one CURLSH. Connections themselves are not shared across
// threads: libcurl does not support one connection cache used by concurrent threads.
//
// Thread-safety: thread-safe; Run may be called from many threads at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "remote/stats.h"

namespace gpufeed::remote {

// SigV4 signing (libcurl's CURLOPT_AWS_SIGV4); an empty `sigv4` sends requests unsigned.
struct Signing {
  std::string sigv4;  // "aws:amz:<region>:s3"
  std::string userpwd;
  std::string session_token;
};

struct HttpRequest {
  std::string url;
  bool head = false;
  // A ranged GET of [begin, begin + length) into dst; else a GET whose body goes to `body`.
  bool ranged = false;
  uint64_t begin = 0;
  uint64_t length = 0;
  bool whole_object = false;  // the range is the whole object: a 200 answer is right too
  char* dst = nullptr;
  std::string* body = nullptr;
  size_t body_cap = 0;
  std::string if_match;             // a strong ETag without quotes; empty: none sent
  std::string if_unmodified_since;  // an HTTP date; empty: none sent
  std::string expect_etag;          // the answer's ETag must be this one (empty: any)
  bool follow_redirects = false;
  const Signing* signing = nullptr;
};

enum class Outcome {
  kOk,
  kHttpStatus,    // an error status that is not retried, or the last of the retries
  kTransport,     // a curl error (connect, reset, timeout) after the retries
  kChanged,       // 412, or an answer carrying another ETag than the pinned one
  kRangeIgnored,  // 200 with the whole object to a ranged GET of part of it
  kBadAnswer,     // a Content-Range other than asked, more bytes than asked
};

struct HttpResult {
  Outcome outcome = Outcome::kOk;
  long status = 0;
  std::string reason;  // the status line's reason phrase ("Not Found"); empty over HTTP/2
  // The ids S3 gives each answer (x-amz-request-id, x-amz-id-2), which its support asks for;
  // empty when the server sent none.
  std::string request_id;
  std::string host_id;
  std::string etag;  // as the server sent it
  std::string last_modified;
  std::optional<uint64_t> content_length;
  std::string error_body;  // the body of an error answer, first 64 KiB
  std::string detail;      // the curl error or what was wrong with the answer
  int attempts = 0;
  bool gave_up = false;  // the last of retryable failures (attempts or time ran out)
};

struct ClientOptions {
  int max_requests = 32;
  double connect_timeout_s = 10;
  double read_timeout_s = 30;
  int max_attempts = 8;
  double retry_budget_s = 60;
};

class HttpClient {
 public:
  HttpClient(ClientOptions options, std::shared_ptr<StatsRecorder> stats);
  ~HttpClient();

  // Runs every request to its end, retries included, all in flight at once within the
  // per-host cap; results[i] is requests[i]'s. Errors are reported in the results, never
  // thrown (bad_alloc aside).
  //
  // `on_done(i)`, where given, is called on this thread as soon as request i is done (its
  // result set, kOk or not), once per request, in the order they finish, before Run returns.
  // The other requests stay in flight meanwhile (their bodies wait in the sockets), and
  // between two calls Run sends what is due, so a caller that works on each answer (decodes
  // an image) overlaps that work with the rest of the transfers. An exception from on_done
  // stops every request still in flight and leaves Run.
  void Run(std::span<const HttpRequest> requests, std::span<HttpResult> results,
           const std::function<void(size_t)>& on_done = nullptr) const;

  const ClientOptions& options() const { return options_; }
  StatsRecorder& stats() const { return *stats_; }

  class Slots;

 private:
  class RunLoop;
  Slots& SlotsFor(const std::string& host) const;

  ClientOptions options_;
  std::shared_ptr<StatsRecorder> stats_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<Slots>> slots_;
};

}  // namespace gpufeed::remote
