// ProgressLine: one line of live progress on stderr. On a terminal it is redrawn in place
// (\r); otherwise (a log, CI) a line is printed at most every `interval_s` seconds and at
// Finish, so logs stay readable.
// Thread-safety: one thread at a time.
#pragma once

#include <chrono>
#include <string>

namespace gpufeed::cli {

class ProgressLine {
 public:
  explicit ProgressLine(bool enabled = true, double interval_s = 5.0);
  ~ProgressLine();
  // Shows `text` now (terminal) or when the interval has passed (log).
  void Update(const std::string& text);
  // Leaves the last text on its own line.
  void Finish();

 private:
  bool enabled_;
  bool tty_;
  double interval_s_;
  std::chrono::steady_clock::time_point last_print_{};
  std::string last_text_;
  size_t last_width_ = 0;
  bool dirty_ = false;
};

}  // namespace gpufeed::cli
