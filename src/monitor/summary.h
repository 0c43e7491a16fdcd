// Summarizing a run: mean, p5 and p95 of each metric over a monitor's history.
// Thread-safety: stateless.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "gpufeed/monitor_types.h"

namespace gpufeed {

// Linear interpolation between closest ranks; `sorted` must be sorted and not empty.
double Percentile(const std::vector<double>& sorted, double q);

MonitorSummary Summarize(const std::deque<MonitorSnapshot>& history,
                         const std::vector<std::string>& warnings);

}  // namespace gpufeed
