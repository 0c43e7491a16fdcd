// StatusLinePrinter: how the monitor and `gpufeed watch` show the live status line. Internal:
// users get the text from FormatStatusLine (gpufeed/monitor_types.h) and print it their own way.
#pragma once

#include <cstdio>
#include <string>

namespace gpufeed {

// Prints a live line to a stream: on a terminal it rewrites one line in place (\r and clear
// to end of line); otherwise it writes one line per call, so logs stay readable. Messages
// (warnings) are printed on a line of their own above the live line. A "line" with '\n' in
// it is a block of lines (the status line and one per process), redrawn in place the same
// way on a terminal (cursor up, clear below).
// Thread-safety: one thread at a time.
class StatusLinePrinter {
 public:
  explicit StatusLinePrinter(FILE* out);
  ~StatusLinePrinter();  // Finish()
  void Update(const std::string& line);
  void Message(const std::string& message);
  // Ends the live line with a newline (on a terminal). Idempotent until the next Update.
  void Finish();

 private:
  FILE* out_;
  bool tty_;
  static int LineCount(const std::string& text);
  // `text` with each line cleared to its end.
  static std::string Terminal(const std::string& text);
  bool line_open_ = false;
  int open_lines_ = 0;  // lines of the block drawn last
  std::string last_line_;
};

}  // namespace gpufeed
