// What a store answered to one request, as the errors that rest on it quote it, in the AWS
// CLI's words: "An error occurred (NoSuchKey) when calling the HeadObject operation: HTTP 404
// Not Found", then the request id and host id a store's support asks for and the endpoint
// asked. A code is quoted only as the store gave it (an error body, or a listing that proves
// the bucket there); a HEAD answer has no body, so its 404 alone names no code.
// Thread-safety: value types and pure functions.
#pragma once

#include <string>
#include <string_view>

#include "remote/http_client.h"

namespace gpufeed::remote {

struct StoreAnswer {
  bool s3 = true;          // an S3 operation; false: a plain HTTP(S) request
  std::string operation;   // "HeadObject", "GetObject", "ListObjectsV2"; "HEAD", "GET" for http
  long status = 0;         // 0: no request was sent (a manifest given to the program)
  std::string reason;      // as the server sent it; empty over HTTP/2
  std::string request_id;  // x-amz-request-id
  std::string host_id;     // x-amz-id-2
  std::string endpoint;    // "scheme://host[:port]" the request went to
};

// The answer `result` holds to the request for `url`. `s3_operation` names it for an S3
// object ("HeadObject"); for a plain HTTP(S) URL the HTTP method is named instead.
StoreAnswer AnswerOf(bool s3, std::string_view s3_operation, const HttpResult& result,
                     std::string_view url);

// "HTTP 404 Not Found": the reason phrase as the server sent it, else the standard one for
// the status (HTTP/2 sends none).
std::string StatusLine(long status, std::string_view reason);

// "request id R, host id H, endpoint E": the parts known, for a parenthesis.
std::string AnswerIds(const StoreAnswer& answer);

// "An error occurred (NoSuchKey) when calling the HeadObject operation: HTTP 404 Not Found"
// for S3, "HEAD answered HTTP 404 Not Found" for HTTP(S). `code` empty: S3's code is
// unknown, and the status stands in for it as the AWS CLI writes it; a 404 then says which
// two codes it may be.
std::string AnswerHeadline(const StoreAnswer& answer, std::string_view code);

// Why the listing of `prefix` ("" for the whole bucket) holds nothing at `key`:
// "ListObjectsV2 of prefix 'train/' found no objects at 'train/x.h5' or under 'train/x.h5/'
// (HTTP 200 OK, request id R, ...)"; with no request sent (status 0), that the manifest given
// to the program holds none.
std::string EmptyListingEvidence(const StoreAnswer& listing, std::string_view prefix,
                                 std::string_view key);

}  // namespace gpufeed::remote
