#include "core/progress.h"

#include <utility>

#include "core/log.h"

namespace gpufeed {

TenthsProgress::TenthsProgress(bool enabled, uint64_t total, Line line, double quiet_seconds)
    : enabled_(enabled && total > 0),
      total_(total),
      line_(std::move(line)),
      quiet_seconds_(quiet_seconds),
      start_(std::chrono::steady_clock::now()) {}

void TenthsProgress::Add(uint64_t units) {
  const uint64_t done = done_.fetch_add(units) + units;
  if (!enabled_) return;
  const int tenth = static_cast<int>(done * 10 / total_);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard lock(mu_);
  if (s < quiet_seconds_ || tenth <= printed_ || tenth >= 10) return;
  printed_ = tenth;
  Log(LogLevel::kInfo, line_(tenth * 10, done, s));
}

}  // namespace gpufeed
