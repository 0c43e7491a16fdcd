#include "monitor/low_utilization_rule.h"

namespace gpufeed {

LowUtilizationRule::LowUtilizationRule(double threshold_ratio, double duration_seconds)
    : threshold_(threshold_ratio), duration_(duration_seconds) {}

std::optional<LowUtilizationStretch> LowUtilizationRule::Observe(double time_seconds,
                                                                 std::optional<double> ratio) {
  if (!ratio || *ratio >= threshold_) {
    start_.reset();
    sum_ = 0;
    count_ = 0;
    fired_ = false;
    return std::nullopt;
  }
  if (!start_) start_ = time_seconds;
  sum_ += *ratio;
  ++count_;
  if (fired_ || time_seconds - *start_ < duration_) return std::nullopt;
  fired_ = true;
  return LowUtilizationStretch{*start_, time_seconds, sum_ / count_};
}

}  // namespace gpufeed
