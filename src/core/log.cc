#include "core/log.h"

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

namespace gpufeed {
namespace {

std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}

LogSink& Sink() {
  static LogSink sink;  // empty: stderr
  return sink;
}

}  // namespace

LogSink SetLogSink(LogSink sink) {
  std::lock_guard lock(SinkMutex());
  return std::exchange(Sink(), std::move(sink));
}

void Log(LogLevel level, std::string_view message) {
  std::lock_guard lock(SinkMutex());
  if (Sink()) {
    Sink()(level, message);
    return;
  }
  // One write per line, so lines of threads (and processes) sharing stderr do not interleave.
  const std::string line = "gpufeed: " + std::string(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace gpufeed
