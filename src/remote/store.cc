// RemoteStore: configuration, HEAD, ListObjectsV2, and the errors of failed requests.
#include "remote/store.h"

#include <fmt/format.h>

#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed::remote {
namespace {

constexpr size_t kMaxListingPage = 16 << 20;
constexpr size_t kMaxListingPages = 100000;

ClientOptions ToClientOptions(const RemoteOptions& o) {
  return {o.max_requests, o.connect_timeout_s, o.read_timeout_s, o.max_attempts, o.retry_budget_s};
}

void CheckRange(bool ok, const char* name, double value, const char* range) {
  if (!ok) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("remote option {} = {} is out of range ({})", name, value, range));
  }
}

}  // namespace

RemoteOptions NormalizeOptions(RemoteOptions o) {
  if (o.max_requests == 0) {
    o.max_requests = 32;
    if (std::optional<std::string> env = ProcessEnv("GPUFEED_MAX_REQUESTS")) {
      std::optional<int> n = ParseNumber<int>(Trim(*env));
      if (!n || *n < 1 || *n > 1024) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("$GPUFEED_MAX_REQUESTS = '{}' is not a number in 1..1024", *env));
      }
      o.max_requests = *n;
    }
  }
  CheckRange(o.max_requests >= 1 && o.max_requests <= 1024, "max_requests", o.max_requests,
             "1..1024");
  CheckRange(o.connect_timeout_s > 0 && o.connect_timeout_s <= 3600, "connect_timeout_s",
             o.connect_timeout_s, "(0, 3600] s");
  CheckRange(o.read_timeout_s > 0 && o.read_timeout_s <= 3600, "read_timeout_s", o.read_timeout_s,
             "(0, 3600] s");
  CheckRange(o.max_attempts >= 1 && o.max_attempts <= 100, "max_attempts", o.max_attempts,
             "1..100");
  CheckRange(o.retry_budget_s >= 0 && o.retry_budget_s <= 86400, "retry_budget_s", o.retry_budget_s,
             "[0, 86400] s");
  return o;
}

RemoteStore::RemoteStore(const RemoteOptions& options, std::shared_ptr<StatsRecorder> stats)
    : options_(NormalizeOptions(options)),
      stats_(std::move(stats)),
      client_(ToClientOptions(options_), stats_) {}

const S3Config& RemoteStore::Config() const {
  std::lock_guard lock(mu_);
  if (!config_) {
    S3Config config = ResolveS3Config(options_);
    if (!config.anonymous) {
      signing_.sigv4 = fmt::format("aws:amz:{}:s3", config.region);
      signing_.userpwd = config.access_key + ":" + config.secret_key;
      signing_.session_token = config.session_token;
    }
    config_ = std::move(config);
  }
  return *config_;
}

std::string RemoteStore::ObjectUrl(const RemoteUri& uri) const {
  if (uri.scheme == UriScheme::kHttp) return uri.uri;
  const S3Config& c = Config();
  return S3ObjectUrl(c.endpoint, c.region, uri.bucket, uri.key);
}

const Signing* RemoteStore::SigningFor(const RemoteUri& uri) const {
  if (uri.scheme == UriScheme::kHttp) return nullptr;
  return Config().anonymous ? nullptr : &signing_;
}

std::string RemoteStore::Describe(const RemoteUri& uri) const {
  const std::string endpoint = "endpoint " + UrlHost(ObjectUrl(uri));
  if (uri.scheme == UriScheme::kHttp) return endpoint;
  return fmt::format("{}, bucket '{}', key '{}', credentials from {}", endpoint, uri.bucket,
                     uri.key, Config().credentials_source);
}

void RemoteStore::Raise(const RequestContext& ctx, const HttpResult& r) const {
  const std::string where =
      ctx.range.empty() ? ctx.uri->uri : fmt::format("{} {}", ctx.uri->uri, ctx.range);
  const std::string about = Describe(*ctx.uri);
  const std::string tries = r.attempts > 1 ? fmt::format(", after {} attempts", r.attempts) : "";
  switch (r.outcome) {
    case Outcome::kOk:
      break;
    case Outcome::kChanged:
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{} changed during the job (ETag \"{}\" at open, {}): its bytes "
                              "are no longer the ones listed; restart the job to read the new "
                              "version",
                              ctx.uri->uri, ctx.pinned_etag, r.detail));
    case Outcome::kRangeIgnored:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}; gpufeed reads only from servers that honour Range", where,
                              r.detail));
    case Outcome::kBadAnswer:
      throw Error(ErrorCode::kIo, fmt::format("{}: {} ({})", where, r.detail, about));
    case Outcome::kTransport:
      throw Error(ErrorCode::kIo,
                  fmt::format("{}: {}{} (last error after {} attempt{}) ({})", where, r.detail,
                              r.status != 0 ? fmt::format(", HTTP {}", r.status) : "", r.attempts,
                              r.attempts == 1 ? "" : "s", about));
    case Outcome::kHttpStatus: {
      const std::string code = XmlElementText(r.error_body, "Code");
      const std::string message = XmlElementText(r.error_body, "Message");
      ErrorCode ec = ErrorCode::kIo;
      if (r.status == 404 || r.status == 410) ec = ErrorCode::kNotFound;
      if (r.status == 401 || r.status == 403) ec = ErrorCode::kPermissionDenied;
      if (r.status == 416) ec = ErrorCode::kCorruptData;  // the object is shorter than pinned
      // Retryable statuses that ran out of attempts or time say which bound ended them.
      std::string_view detail = r.detail;
      if (const std::string lead = fmt::format("HTTP {}; ", r.status); detail.starts_with(lead)) {
        detail.remove_prefix(lead.size());
      }
      const std::string bound = r.gave_up ? fmt::format(" ({})", detail) : "";
      StoreAnswer answer = AnswerOf(ctx.uri->scheme == UriScheme::kS3, ctx.operation, r, "");
      answer.endpoint.clear();  // named by `about`
      std::string headline = AnswerHeadline(answer, code);
      // Over plain HTTP(S) an S3-API server's code is quoted as it came.
      if (!answer.s3 && !code.empty()) headline += " (" + code + ")";
      const std::string ids = AnswerIds(answer);
      throw Error(
          ec, fmt::format("{}: {}{}{}{} ({}{}{}{})", where, headline,
                          message.empty() ? "" : ": " + message, tries, bound, ids,
                          ids.empty() ? "" : ", ", about, ctx.note.empty() ? "" : "; " + ctx.note));
    }
  }
  throw Error(ErrorCode::kIo, where + ": request failed");
}

std::optional<ObjectInfo> RemoteStore::Head(const RemoteUri& uri, bool missing_ok,
                                            StoreAnswer* missing) const {
  HttpRequest req;
  req.url = ObjectUrl(uri);
  req.head = true;
  req.follow_redirects = uri.scheme == UriScheme::kHttp;
  req.signing = SigningFor(uri);
  HttpResult result;
  client_.Run({&req, 1}, {&result, 1});
  if (result.outcome != Outcome::kOk) {
    if (missing_ok && result.outcome == Outcome::kHttpStatus &&
        (result.status == 404 || result.status == 410)) {
      if (missing != nullptr) {
        *missing = AnswerOf(uri.scheme == UriScheme::kS3, "HeadObject", result, req.url);
      }
      return std::nullopt;
    }
    RequestContext context{&uri, {}, {}, "HeadObject", {}};
    if (uri.scheme == UriScheme::kS3 && result.outcome == Outcome::kHttpStatus &&
        result.status >= 400 && result.status < 500) {
      // A HEAD answer has no body: a one-byte GET fetches the error's Code (NoSuchBucket or
      // NoSuchKey, InvalidAccessKeyId or SignatureDoesNotMatch).
      char byte = 0;
      req.head = false;
      req.ranged = true;
      req.length = 1;
      req.dst = &byte;
      HttpResult probe;
      client_.Run({&req, 1}, {&probe, 1});
      if (probe.outcome == Outcome::kHttpStatus && probe.status == result.status &&
          !XmlElementText(probe.error_body, "Code").empty()) {
        result.error_body = std::move(probe.error_body);
        context.note = "the code as a one-byte GetObject answered it";
        if (!probe.request_id.empty()) context.note += ", request id " + probe.request_id;
      }
    }
    Raise(context, result);
  }
  if (!result.content_length) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: the server sent no Content-Length to HEAD, so the size of the "
                            "file is unknown",
                            uri.uri));
  }
  ObjectInfo info;
  info.size = *result.content_length;
  info.weak_etag = Trim(result.etag).starts_with("W/");
  info.etag = UnquoteEtag(result.etag);
  info.last_modified = result.last_modified;
  return info;
}

std::vector<ListedObject> RemoteStore::ListAll(const RemoteUri& bucket_uri,
                                               const std::string& prefix,
                                               StoreAnswer* answer) const {
  const S3Config& c = Config();
  const std::string base = S3BucketUrl(c.endpoint, c.region, bucket_uri.bucket);
  const std::string what = fmt::format("s3://{}/{}", bucket_uri.bucket, prefix);
  std::vector<ListedObject> all;
  std::string token;
  for (size_t page = 0;; ++page) {
    if (page == kMaxListingPages) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the listing goes on past {} pages", what, kMaxListingPages));
    }
    // SigV4 wants the query sorted by name; libcurl signs it as given.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + SigV4Encode(token, false) + "&";
    query += "encoding-type=url&list-type=2&prefix=" + SigV4Encode(prefix, false);
    HttpRequest req;
    std::string body;
    req.url = base + "?" + query;
    req.body = &body;
    req.body_cap = kMaxListingPage;
    req.signing = SigningFor(bucket_uri);
    HttpResult result;
    stats_->Listing();
    client_.Run({&req, 1}, {&result, 1});
    RemoteUri listed = bucket_uri;
    listed.uri = what;
    listed.key = prefix;
    if (result.outcome != Outcome::kOk) Raise({&listed, {}, {}, "ListObjectsV2", {}}, result);
    if (answer != nullptr) *answer = AnswerOf(true, "ListObjectsV2", result, req.url);
    ListPage parsed = ParseListObjectsV2(body, what);
    for (ListedObject& o : parsed.objects) {
      if (o.key.starts_with(prefix)) all.push_back(std::move(o));
    }
    if (!parsed.truncated) break;
    if (parsed.next_token == token) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: the listing repeats its continuation token", what));
    }
    token = std::move(parsed.next_token);
  }
  return all;
}

}  // namespace gpufeed::remote
