// What the process's remote reads have done (requests, retries, bytes, latency). Part of the core so that the loader's stats and the doctor read them
// whether or not this build has remote support (GPUFEED_WITH_REMOTE): without it, or before
// the first remote read, every figure is zero.
#pragma once

#include <cstdint>

namespace gpufeed {

// What a remote file system has done so far, for the doctor's remote stage and the monitor.
struct RemoteStats {
  int64_t requests = 0;       // HTTP requests sent (retries included)
  int64_t retries = 0;        // requests that were retries
  int64_t throttled = 0;      // 503 and 429 responses
  int64_t failed = 0;         // requests that ended in an error after their retries
  int64_t listings = 0;       // ListObjectsV2 requests
  int64_t bytes = 0;          // body bytes received
  double latency_mean_s = 0;  // request start to last byte
  double latency_p99_s = 0;
  int max_in_flight = 0;  // most requests in flight at once
  int max_requests = 0;   // the cap in use
};

// The figures of the process's remote file system; all zero when it was never used (and then
// not created by this call) or when this program has no remote support.
RemoteStats ProcessRemoteStats();

}  // namespace gpufeed
