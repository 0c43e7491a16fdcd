#include "cli/progress_line.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace gpufeed::cli {

ProgressLine::ProgressLine(bool enabled, double interval_s)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1), interval_s_(interval_s) {}

ProgressLine::~ProgressLine() { Finish(); }

void ProgressLine::Update(const std::string& text) {
  if (!enabled_) return;
  std::fflush(stdout);  // what the command printed before stays above the progress
  last_text_ = text;
  dirty_ = true;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (tty_) {
    if (since < 0.1) return;  // redrawing faster than the eye helps nobody
    const size_t pad = last_width_ > text.size() ? last_width_ - text.size() : 0;
    fmt::print(stderr, "\r{}{}", text, std::string(pad, ' '));
    std::fflush(stderr);
    last_width_ = text.size();
    dirty_ = false;
  } else if (since >= interval_s_) {
    fmt::print(stderr, "{}\n", text);
    dirty_ = false;
  } else {
    return;
  }
  last_print_ = now;
}

void ProgressLine::Finish() {
  if (!enabled_) return;
  if (tty_) {
    if (dirty_) fmt::print(stderr, "\r{}", last_text_);
    if (last_width_ > 0 || dirty_) fmt::print(stderr, "\n");
  } else if (dirty_) {
    fmt::print(stderr, "{}\n", last_text_);
  }
  std::fflush(stderr);
  last_width_ = 0;
  dirty_ = false;
}

}  // namespace gpufeed::cli
