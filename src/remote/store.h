// What a remote file system and its files share: the options, the HTTP client, the S3
// configuration (looked up at the first S3 request), and the requests that are not byte
// reads: HEAD and ListObjectsV2. Every failed request becomes one Error here, named by
// object, byte range, operation, status line, the server's error code, request id and host
// id, endpoint and credentials source (store_answer.h: in the AWS CLI's words).
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/remote.h"
#include "remote/credentials.h"
#include "remote/http_client.h"
#include "remote/list_xml.h"
#include "remote/store_answer.h"
#include "remote/uri.h"

namespace gpufeed::remote {

// An object's size and version as pinned for the job.
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;           // without quotes; empty when the server sent none
  bool weak_etag = false;     // W/"..." (HTTP): compared, never sent in If-Match
  std::string last_modified;  // the HTTP date, when known
};

// What a failed request was about, for its error message.
struct RequestContext {
  const RemoteUri* uri = nullptr;
  std::string range;  // "bytes 0-99", empty for HEAD and listings
  std::string pinned_etag;
  std::string operation = "GetObject";  // the S3 operation (HeadObject, ListObjectsV2)
  std::string note;                     // more evidence, for the end of the message
};

// RemoteOptions with defaults filled in (max_requests from $GPUFEED_MAX_REQUESTS or 32);
// throws Error(kInvalidArgument) for values out of range.
RemoteOptions NormalizeOptions(RemoteOptions options);

class RemoteStore {
 public:
  RemoteStore(const RemoteOptions& options, std::shared_ptr<StatsRecorder> stats);

  const RemoteOptions& options() const { return options_; }
  const HttpClient& client() const { return client_; }
  StatsRecorder& stats() const { return *stats_; }

  // The URL of an object (s3: on the configured endpoint) and how its requests are signed
  // (nullptr: unsigned). Both look the S3 configuration up on first use.
  std::string ObjectUrl(const RemoteUri& uri) const;
  const Signing* SigningFor(const RemoteUri& uri) const;

  // HEAD: the object's size and version; nullopt for 404 when `missing_ok`, the answer then
  // in `*missing` where given.
  std::optional<ObjectInfo> Head(const RemoteUri& uri, bool missing_ok,
                                 StoreAnswer* missing = nullptr) const;
  // Every object under `prefix` (a key, "" or ending in '/'), all pages; the answer to the
  // last page in `*answer` where given.
  std::vector<ListedObject> ListAll(const RemoteUri& bucket_uri, const std::string& prefix,
                                    StoreAnswer* answer = nullptr) const;

  // Throws the Error that `result` (a failed request) means.
  [[noreturn]] void Raise(const RequestContext& context, const HttpResult& result) const;

 private:
  const S3Config& Config() const;
  std::string Describe(const RemoteUri& uri) const;

  RemoteOptions options_;
  std::shared_ptr<StatsRecorder> stats_;
  HttpClient client_;
  mutable std::mutex mu_;
  mutable std::optional<S3Config> config_;
  mutable Signing signing_;
};

}  // namespace gpufeed::remote
