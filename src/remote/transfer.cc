// One request's attempts: setup, answer checks, retry decisions.
#include "remote/transfer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/text.h"
#include "remote/list_xml.h"
#include "remote/retry.h"

namespace gpufeed::remote {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;
constexpr size_t kMaxHeaderValue = 8 * 1024;
constexpr size_t kMaxQuoted = 256;  // reason phrase and ids, as error messages quote them

double UniformUnit() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

bool HeaderIs(std::string_view name, std::string_view want) {
  return name.size() == want.size() &&
         std::equal(name.begin(), name.end(), want.begin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

// "bytes A-B/T" -> (A, B); nullopt when malformed.
std::optional<std::pair<uint64_t, uint64_t>> ParseContentRange(std::string_view v) {
  if (!v.starts_with("bytes ")) return std::nullopt;
  v.remove_prefix(6);
  const size_t dash = v.find('-');
  const size_t slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return std::nullopt;
  }
  auto a = ParseNumber<uint64_t>(v.substr(0, dash));
  auto b = ParseNumber<uint64_t>(v.substr(dash + 1, slash - dash - 1));
  if (!a || !b || *b < *a) return std::nullopt;
  return std::make_pair(*a, *b);
}

// `text` as an error message may quote it: printable ASCII only, at most kMaxQuoted bytes.
std::string Quotable(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, kMaxQuoted)) out += c >= 0x20 && c < 0x7f ? c : '?';
  return out;
}

}  // namespace

bool IsRetryableCurlError(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool IsRetryableStatus(long status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

Transfer::Transfer(const HttpRequest& request, HttpResult& result, const ClientOptions& options,
                   StatsRecorder& stats, Clock::time_point now)
    : request_(request),
      result_(result),
      options_(options),
      stats_(stats),
      deadline_(now + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(options.retry_budget_s))),
      next_at_(now) {
  result_ = HttpResult{};
}

Transfer::~Transfer() { curl_slist_free_all(headers_); }

void Transfer::StartAttempt(CURL* easy, Clock::time_point now) {
  ++result_.attempts;
  attempt_start_ = now;
  status_ = 0;
  content_range_.clear();
  retry_after_s_.reset();
  checked_ = false;
  to_error_body_ = false;
  abort_.reset();
  error_buffer_[0] = 0;
  result_.error_body.clear();
  if (request_.body != nullptr) request_.body->clear();
  curl_slist_free_all(headers_);
  headers_ = nullptr;
  if (request_.ranged) {
    const uint64_t first = request_.begin + received_;
    const uint64_t last = request_.begin + request_.length - 1;
    headers_ = curl_slist_append(headers_, fmt::format("Range: bytes={}-{}", first, last).c_str());
  }
  if (!request_.if_match.empty()) {
    headers_ =
        curl_slist_append(headers_, fmt::format("If-Match: \"{}\"", request_.if_match).c_str());
  }
  if (!request_.if_unmodified_since.empty()) {
    headers_ = curl_slist_append(headers_,
                                 ("If-Unmodified-Since: " + request_.if_unmodified_since).c_str());
  }
  const Signing* signing = request_.signing;
  if (signing != nullptr && !signing->sigv4.empty()) {
    // libcurl signs this header with the rest and uses its value as the payload hash.
    headers_ = curl_slist_append(headers_, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!signing->session_token.empty()) {
      headers_ =
          curl_slist_append(headers_, ("x-amz-security-token: " + signing->session_token).c_str());
    }
    curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, signing->sigv4.c_str());
    curl_easy_setopt(easy, CURLOPT_USERPWD, signing->userpwd.c_str());
  }
  curl_easy_setopt(easy, CURLOPT_URL, request_.url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(easy, CURLOPT_NOBODY, request_.head ? 1L : 0L);
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, request_.follow_redirects ? 1L : 0L);
  curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::ceil(options_.connect_timeout_s * 1000)));
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(std::ceil(options_.read_timeout_s))));
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer_);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Transfer::OnHeader);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Transfer::OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, this);
}

size_t Transfer::OnHeader(char* data, size_t size, size_t count, void* self_ptr) {
  auto* self = static_cast<Transfer*>(self_ptr);
  const size_t n = size * count;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {
    const size_t space = line.find(' ');
    self->status_ = 0;
    self->result_.reason.clear();
    if (space != std::string_view::npos) {
      self->status_ = ParseNumber<long>(line.substr(space + 1, 3)).value_or(0);
      if (line.size() > space + 4) self->result_.reason = Quotable(Trim(line.substr(space + 4)));
    }
    self->content_range_.clear();
    self->retry_after_s_.reset();
    self->result_.request_id.clear();
    self->result_.host_id.clear();
    self->result_.etag.clear();
    self->result_.last_modified.clear();
    self->result_.content_length.reset();
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = Trim(line.substr(colon + 1));
  if (value.size() > kMaxHeaderValue) return n;
  if (HeaderIs(name, "etag")) {
    self->result_.etag = std::string(value);
  } else if (HeaderIs(name, "last-modified")) {
    self->result_.last_modified = std::string(value);
  } else if (HeaderIs(name, "content-range")) {
    self->content_range_ = std::string(value);
  } else if (HeaderIs(name, "content-length")) {
    self->result_.content_length = ParseNumber<uint64_t>(value);
  } else if (HeaderIs(name, "x-amz-request-id")) {
    self->result_.request_id = Quotable(value);
  } else if (HeaderIs(name, "x-amz-id-2")) {
    self->result_.host_id = Quotable(value);
  } else if (HeaderIs(name, "retry-after")) {
    self->retry_after_s_ = ParseRetryAfter(value, static_cast<int64_t>(time(nullptr)));
  }
  return n;
}

bool Transfer::CheckAnswer() {
  checked_ = true;
  if (status_ < 200 || status_ > 299) {
    to_error_body_ = true;
    return true;
  }
  auto stop = [&](Outcome outcome, std::string detail) {
    abort_ = outcome;
    abort_detail_ = std::move(detail);
    return false;
  };
  if (!request_.expect_etag.empty() && !result_.etag.empty() &&
      UnquoteEtag(result_.etag) != request_.expect_etag) {
    return stop(Outcome::kChanged, fmt::format("now {}", result_.etag));
  }
  if (!request_.ranged) return true;
  const uint64_t first = request_.begin + received_;
  const uint64_t last = request_.begin + request_.length - 1;
  if (status_ == 200) {
    if (request_.whole_object && received_ == 0) return true;
    return stop(Outcome::kRangeIgnored,
                fmt::format("the server answered 200 with the whole object to a request for "
                            "bytes {}-{}: it ignores Range",
                            first, last));
  }
  const auto range = ParseContentRange(content_range_);
  if (status_ != 206 || !range || range->first != first || range->second != last) {
    return stop(Outcome::kBadAnswer,
                fmt::format("asked for bytes {}-{}, the server answered {} with Content-Range "
                            "'{}'",
                            first, last, status_, content_range_));
  }
  return true;
}

size_t Transfer::OnBody(char* data, size_t size, size_t count, void* self_ptr) {
  auto* self = static_cast<Transfer*>(self_ptr);
  const size_t n = size * count;
  if (!self->checked_ && !self->CheckAnswer()) return 0;  // 0 stops the transfer
  if (self->to_error_body_) {
    std::string& body = self->result_.error_body;
    body.append(data, std::min(n, kMaxErrorBody - body.size()));
    return n;
  }
  const HttpRequest& r = self->request_;
  if (r.ranged) {
    const uint64_t wanted = r.length;
    if (n > wanted - self->received_) {
      self->abort_ = Outcome::kBadAnswer;
      self->abort_detail_ = fmt::format("the server sent more than the {} bytes asked", wanted);
      return 0;
    }
    std::memcpy(r.dst + self->received_, data, n);
    self->received_ += n;
  } else if (r.body != nullptr) {
    if (n > r.body_cap - r.body->size()) {
      self->abort_ = Outcome::kBadAnswer;
      self->abort_detail_ = fmt::format("the answer is larger than {} bytes", r.body_cap);
      return 0;
    }
    r.body->append(data, n);
  }
  self->stats_.Bytes(static_cast<int64_t>(n));
  return n;
}

bool Transfer::Fail(Outcome outcome, std::string detail) {
  result_.outcome = outcome;
  result_.status = status_;
  result_.detail = std::move(detail);
  if (outcome != Outcome::kOk) stats_.Failed();
  return true;
}

bool Transfer::ScheduleRetry(std::string why, Clock::time_point now) {
  const Outcome last = status_ == 0 ? Outcome::kTransport : Outcome::kHttpStatus;
  if (result_.attempts >= options_.max_attempts) {
    result_.gave_up = true;
    return Fail(last, std::move(why));
  }
  double delay = BackoffDelayS(result_.attempts, UniformUnit());
  if (retry_after_s_) delay = std::max(delay, *retry_after_s_);
  const auto wake =
      now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay));
  if (wake > deadline_) {
    result_.gave_up = true;
    return Fail(last, fmt::format("{}; the next try (in {:.1f} s{}) would pass the {:.0f} s retry "
                                  "budget",
                                  why, delay, retry_after_s_ ? ", as Retry-After asks" : "",
                                  options_.retry_budget_s));
  }
  next_at_ = wake;
  return false;
}

bool Transfer::FinishAttempt(CURLcode code, Clock::time_point now) {
  const double latency = std::chrono::duration<double>(now - attempt_start_).count();
  stats_.Request(result_.attempts > 1, latency);
  if (status_ == 503 || status_ == 429) stats_.Throttled();
  if (abort_) return Fail(*abort_, abort_detail_);
  if (code != CURLE_OK) {
    std::string why = fmt::format("{}{}{}", curl_easy_strerror(code), error_buffer_[0] ? ": " : "",
                                  error_buffer_);
    if (!IsRetryableCurlError(code)) return Fail(Outcome::kTransport, std::move(why));
    status_ = 0;
    return ScheduleRetry(std::move(why), now);
  }
  if (status_ >= 200 && status_ <= 299) {
    if (!request_.head && !request_.expect_etag.empty() && !checked_ && !CheckAnswer()) {
      return Fail(*abort_, abort_detail_);
    }
    if (request_.head && !request_.expect_etag.empty() && !result_.etag.empty() &&
        UnquoteEtag(result_.etag) != request_.expect_etag) {
      return Fail(Outcome::kChanged, fmt::format("now {}", result_.etag));
    }
    if (request_.ranged && received_ < request_.length) {
      status_ = 0;
      return ScheduleRetry(
          fmt::format("the body ended after {} of {} bytes", received_, request_.length), now);
    }
    return Fail(Outcome::kOk, {});
  }
  if (status_ == 412)
    return Fail(Outcome::kChanged, "now another: the store answered 412 to If-Match");
  if (IsRetryableStatus(status_)) return ScheduleRetry(fmt::format("HTTP {}", status_), now);
  return Fail(Outcome::kHttpStatus, fmt::format("HTTP {}", status_));
}

}  // namespace gpufeed::remote
