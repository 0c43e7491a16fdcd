// What a remote file system and its files share: the options, the HTTP client, the S3
// configuration (looked up at the first S3 request), and the requests that are not byte
// reads: HEAD and ListObjectsV2. Every failed request becomes one Error here, named by
// object, byte range, endpoint, credentials source and the server's error code.
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

  // HEAD: the object's size and version; nullopt for 404 when `missing_ok`.
  std::optional<ObjectInfo> Head(const RemoteUri& uri, bool missing_ok) const;
  // Every object under `prefix` (a key, "" or ending in '/'), all pages.
  std::vector<ListedObject> ListAll(const RemoteUri& bucket_uri, const std::string& prefix) const;

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
