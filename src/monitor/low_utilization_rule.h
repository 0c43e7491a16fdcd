// LowUtilizationRule: decides when one GPU's utilization has stayed below a threshold for a
// given time.
//
// Time comes from the caller (the monitor's clock), so tests drive the rule with exact
// times. A stretch starts at the first reading below the threshold; the rule fires at the
// first low reading at least `duration` after that start, once per stretch. A reading at or
// above the threshold, or a missing one, ends the stretch (a missing reading cannot show
// that the GPU stayed idle).
// Thread-safety: one thread at a time.
#pragma once

#include <optional>

namespace gpufeed {

struct LowUtilizationStretch {
  double start_seconds = 0;
  double end_seconds = 0;
  double mean_ratio = 0;  // over the readings of the stretch
};

class LowUtilizationRule {
 public:
  LowUtilizationRule(double threshold_ratio, double duration_seconds);

  // The stretch when this reading makes it long enough (once per stretch), else nullopt.
  std::optional<LowUtilizationStretch> Observe(double time_seconds, std::optional<double> ratio);

 private:
  double threshold_;
  double duration_;
  std::optional<double> start_;
  double sum_ = 0;
  int count_ = 0;
  bool fired_ = false;
};

}  // namespace gpufeed
