// Snapshots as JSON (one object per line in the JSON lines log) and the JSON lines writer.
// Units are in the key names (bytes, seconds, watts, celsius, hertz, ratios 0-1); a reading
// that is not there is null, never 0.
// Thread-safety: SnapshotToJson is stateless; JsonLinesWriter is one thread at a time.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "gpufeed/monitor_types.h"

namespace gpufeed {

nlohmann::json SnapshotToJson(const MonitorSnapshot& snapshot);

class JsonLinesWriter {
 public:
  // Truncates or creates `path`. Throws Error(kIo) naming the path and the OS error.
  explicit JsonLinesWriter(const std::string& path);
  ~JsonLinesWriter();
  JsonLinesWriter(const JsonLinesWriter&) = delete;
  JsonLinesWriter& operator=(const JsonLinesWriter&) = delete;

  // Writes and flushes one line, so a crash loses at most the line being written. A failed
  // write is reported once on stderr and then skipped: monitoring must not stop training.
  void Write(const MonitorSnapshot& snapshot);

 private:
  std::string path_;
  FILE* file_ = nullptr;
  bool failed_ = false;
};

}  // namespace gpufeed
