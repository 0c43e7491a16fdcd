// The one way library code tells a person something outside a return value or an Error: a
// cache's choice, a long build's progress, a fallback taken. Nothing in the library writes
// to stderr itself; it calls Log, and the sink decides. The default sink writes
// "gpufeed: <message>" lines to stderr, which is what the CLI and the Python package want
// (Python: fd 2 is sys.stderr's file, so the lines interleave with Python's own in order,
// and a sink that took the GIL could deadlock a worker logging while the consumer joins it).
// Tests and embedders install their own with SetLogSink.
// Thread-safety: thread-safe. Log may be called from any thread; one message at a time
// reaches the sink, whole.
#pragma once

#include <functional>
#include <string_view>

namespace gpufeed {

enum class LogLevel { kInfo, kWarning };

using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Replaces the sink; an empty one restores the stderr default. Returns the previous sink.
LogSink SetLogSink(LogSink sink);

// Hands `message` (one line, no "gpufeed: " prefix, no newline) to the sink.
void Log(LogLevel level, std::string_view message);

}  // namespace gpufeed
