// Remote URIs: s3://bucket/key and http(s)://host[:port]/path, parsed and checked, and the
// URL an S3 object is requested at (path-style on a custom endpoint, virtual-hosted on AWS).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace gpufeed::remote {

enum class UriScheme { kS3, kHttp };

struct RemoteUri {
  UriScheme scheme = UriScheme::kS3;
  std::string uri;     // as given
  std::string bucket;  // s3 only
  std::string key;     // s3 only: every byte after "bucket/", taken as written (no decoding)
};

// Throws Error(kInvalidArgument) naming the URI for a bad bucket name, an http(s) URL
// without a host, or one holding white space or control characters.
RemoteUri ParseRemoteUri(std::string_view uri);

// Throws Error(kInvalidArgument) unless `bucket` follows S3's naming rules: 3-63 characters
// of a-z, 0-9, '.' and '-', starting and ending with a letter or digit, no "..", not an IP
// address.
void CheckBucketName(std::string_view bucket, std::string_view uri);

// SigV4's URI encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XX (upper-case hex); '/' is
// kept when `keep_slash` (object keys in a path) and encoded otherwise (query values).
std::string SigV4Encode(std::string_view text, bool keep_slash);

// The URL of `key` in `bucket`: `endpoint`/bucket/key when an endpoint is given, else AWS's
// https://bucket.s3.<region>.amazonaws.com/key (path-style on AWS for a bucket with dots,
// which a virtual-hosted TLS certificate does not cover).
std::string S3ObjectUrl(std::string_view endpoint, std::string_view region, std::string_view bucket,
                        std::string_view key);

// The URL ListObjectsV2 is sent to for `bucket` (no query), addressed as S3ObjectUrl does.
std::string S3BucketUrl(std::string_view endpoint, std::string_view region,
                        std::string_view bucket);

// "scheme://host[:port]" of a URL: the unit the per-host request cap counts in.
std::string UrlHost(std::string_view url);

}  // namespace gpufeed::remote
