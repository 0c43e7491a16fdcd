// One request of HttpClient::Run through its attempts: the curl easy handle's setup, the
// header and body callbacks that check each answer before a byte is kept, and the verdict
// on each attempt (done, or retry when).
// Thread-safety: one thread at a time (the thread running the request).
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <optional>
#include <string>

#include "remote/http_client.h"

namespace gpufeed::remote {

using Clock = std::chrono::steady_clock;

class Transfer {
 public:
  Transfer(const HttpRequest& request, HttpResult& result, const ClientOptions& options,
           StatsRecorder& stats, Clock::time_point now);
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  // Sets `easy` up for the next attempt (which asks only for the bytes still missing).
  void StartAttempt(CURL* easy, Clock::time_point now);
  // Takes the attempt's end: sets the result and returns true when the request is done,
  // else schedules the retry (next_at()) and returns false.
  bool FinishAttempt(CURLcode code, Clock::time_point now);

  Clock::time_point next_at() const { return next_at_; }
  const HttpRequest& request() const { return request_; }

 private:
  static size_t OnHeader(char* data, size_t size, size_t count, void* self);
  static size_t OnBody(char* data, size_t size, size_t count, void* self);
  bool CheckAnswer();  // on the first body byte of a success answer
  bool Fail(Outcome outcome, std::string detail);
  bool ScheduleRetry(std::string why, Clock::time_point now);

  const HttpRequest& request_;
  HttpResult& result_;
  const ClientOptions& options_;
  StatsRecorder& stats_;
  Clock::time_point deadline_;
  Clock::time_point next_at_;
  Clock::time_point attempt_start_;
  curl_slist* headers_ = nullptr;
  char error_buffer_[CURL_ERROR_SIZE] = {};
  uint64_t received_ = 0;  // ranged bytes kept, over all attempts

  // The current answer (reset at each status line: redirects, 100 Continue).
  long status_ = 0;
  std::string content_range_;
  std::optional<double> retry_after_s_;
  bool checked_ = false;
  bool to_error_body_ = false;
  std::optional<Outcome> abort_;  // set when a callback stopped the transfer
  std::string abort_detail_;
};

// True for the curl errors worth another attempt: connection refused or reset, timeouts, a
// body cut short.
bool IsRetryableCurlError(CURLcode code);
// True for 429, 500, 502, 503 and 504.
bool IsRetryableStatus(long status);

}  // namespace gpufeed::remote
