// Remote data: objects in an S3-API store (AWS S3, MinIO, Ceph RGW, AIStore) as
// s3://bucket/key, and files on HTTP servers that honour Range as http(s)://host/path, read
// through the file seam (gpufeed/file.h) with ranged requests, so every source reads them
// unchanged.
//
// Requests go through libcurl: connections kept alive and reused, at most `max_requests` in
// flight per host, SigV4 signing (CURLOPT_AWS_SIGV4) with the credentials boto3 would use.
// 503, 429, 500, resets and timeouts are retried with exponential backoff and full jitter,
// honouring Retry-After, bounded in attempts and in time; a body cut mid-transfer resumes
// from the bytes already received. Each object's ETag is pinned when it is opened (or
// listed): a later read that meets another version fails with Error(kCorruptData) naming the
// object, and bytes of two versions are never mixed.
//
// Thread-safety: a RemoteFileSystem and its files are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/remote_stats.h"

namespace gpufeed {

struct RemoteOptions {
  // Default: 0 = $GPUFEED_MAX_REQUESTS, else 32. Requests in flight at once per host, in
  // this process.
  int max_requests = 0;
  double connect_timeout_s = 10;  // Default: 10 s to connect
  // Default: 30 s. A transfer that receives no byte for this long is cut (and retried).
  double read_timeout_s = 30;
  int max_attempts = 8;        // Default: 8 attempts per request (the first included)
  double retry_budget_s = 60;  // Default: 60 s of retrying per request, at most
  // Default: false. True: requests are not signed (public buckets); no credentials looked up.
  bool anonymous = false;
  // Default: empty = $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL, else AWS's endpoint for
  // the region. A custom endpoint is addressed path-style (http://host:port/bucket/key).
  std::string endpoint = {};
  std::string region = {};   // Default: empty = $AWS_REGION, $AWS_DEFAULT_REGION, the profile's
  std::string profile = {};  // Default: empty = $AWS_PROFILE, else "default"
};

// An object of a manifest: its URI, size and the ETag pinned for the job.
struct RemoteObject {
  std::string uri;
  uint64_t size = 0;
  std::string etag;
};

class RemoteFileSystem : public FileSystem {
 public:
  // Throws Error(kInvalidArgument) for bad options. Credentials and region are looked up at
  // the first S3 request, not here.
  static std::shared_ptr<RemoteFileSystem> Create(RemoteOptions options = {});

  // Open: a HEAD request (size and ETag) unless a manifest already holds the object.
  // Throws Error(kNotFound) for a missing bucket or object and Error(kPermissionDenied) for
  // 403, naming the operation, S3's error code, the status line, the request id and host id,
  // the bucket, key, endpoint and credentials source; Error(kIo) when the store cannot be
  // reached within the retry bounds.
  // Type and List: a folder is a prefix. The first List under a prefix lists it whole once
  // (ListObjectsV2, every page) and keeps that manifest: later Lists, Types and Opens under
  // it send no request.

  // Every object listed or opened so far.
  virtual std::vector<RemoteObject> Manifest() const = 0;
  // Adds objects listed elsewhere (rank 0's listing, broadcast): Open, Type and List under
  // `prefix` use them and send no listing. `prefix` is a folder URI ("s3://b/train/").
  virtual void AddManifest(const std::string& prefix, std::vector<RemoteObject> objects) = 0;
  virtual RemoteStats stats() const = 0;
};

// The process's remote file system, the one DefaultFileSystem() sends URIs to. Created on
// first use from RemoteOptions{} (the environment).
std::shared_ptr<RemoteFileSystem> DefaultRemoteFileSystem();
// Replaces the options of the process's remote file system for files opened from now on.
void SetDefaultRemoteOptions(const RemoteOptions& options);

}  // namespace gpufeed
