// Remote URI parsing and SigV4 encoding.
#include "remote/uri.h"

#include <fmt/format.h>

#include "gpufeed/error.h"
#include "gpufeed/remote.h"

namespace gpufeed {
namespace remote {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool LooksLikeIpv4(std::string_view s) {
  int dots = 0;
  for (char c : s) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

[[noreturn]] void BadUri(std::string_view uri, std::string_view why) {
  throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", uri, why));
}

}  // namespace

void CheckBucketName(std::string_view bucket, std::string_view uri) {
  if (bucket.size() < 3 || bucket.size() > 63) {
    BadUri(uri, fmt::format("bucket name '{}' must be 3 to 63 characters long", bucket));
  }
  for (char c : bucket) {
    if (!IsLowerAlnum(c) && c != '.' && c != '-') {
      BadUri(uri, fmt::format("bucket name '{}' may hold only a-z, 0-9, '.' and '-'", bucket));
    }
  }
  if (!IsLowerAlnum(bucket.front()) || !IsLowerAlnum(bucket.back())) {
    BadUri(uri, fmt::format("bucket name '{}' must start and end with a letter or digit", bucket));
  }
  if (bucket.find("..") != std::string_view::npos) {
    BadUri(uri, fmt::format("bucket name '{}' must not hold '..'", bucket));
  }
  if (LooksLikeIpv4(bucket)) {
    BadUri(uri, fmt::format("bucket name '{}' must not be an IP address", bucket));
  }
}

RemoteUri ParseRemoteUri(std::string_view uri) {
  RemoteUri out;
  out.uri = std::string(uri);
  if (uri.starts_with("s3://")) {
    const std::string_view rest = uri.substr(5);
    const size_t slash = rest.find('/');
    out.bucket = std::string(rest.substr(0, slash));
    if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
    CheckBucketName(out.bucket, uri);
    return out;
  }
  size_t host_begin = 0;
  if (uri.starts_with("http://")) {
    host_begin = 7;
  } else if (uri.starts_with("https://")) {
    host_begin = 8;
  } else {
    BadUri(uri, "not an s3://, http:// or https:// URI");
  }
  out.scheme = UriScheme::kHttp;
  const size_t host_end = uri.find_first_of("/?#", host_begin);
  if (host_end == host_begin || host_begin == uri.size()) BadUri(uri, "the URL names no host");
  for (unsigned char c : uri) {
    if (c <= ' ' || c == 0x7f) {
      BadUri(uri, "the URL holds white space or a control character (percent-encode it)");
    }
  }
  return out;
}

std::string SigV4Encode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string S3ObjectUrl(std::string_view endpoint, std::string_view region, std::string_view bucket,
                        std::string_view key) {
  const std::string path = SigV4Encode(key, /*keep_slash=*/true);
  if (!endpoint.empty()) {
    while (endpoint.ends_with('/')) endpoint.remove_suffix(1);
    return fmt::format("{}/{}/{}", endpoint, bucket, path);
  }
  if (bucket.find('.') != std::string_view::npos) {
    return fmt::format("https://s3.{}.amazonaws.com/{}/{}", region, bucket, path);
  }
  return fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket, region, path);
}

std::string S3BucketUrl(std::string_view endpoint, std::string_view region,
                        std::string_view bucket) {
  std::string url = S3ObjectUrl(endpoint, region, bucket, "");
  if (!endpoint.empty() || bucket.find('.') != std::string_view::npos) url.pop_back();
  return url;
}

std::string UrlHost(std::string_view url) {
  const size_t scheme_end = url.find("://");
  const size_t host_begin = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const size_t host_end = url.find_first_of("/?#", host_begin);
  return std::string(url.substr(0, host_end));
}

}  // namespace remote
}  // namespace gpufeed
