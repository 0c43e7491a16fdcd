// The Prometheus text exposition (format 0.0.4) of a snapshot.
//
// Names follow Prometheus conventions: the gpufeed_ prefix, base units in the name (bytes,
// seconds, watts, celsius, hertz), ratios 0-1, `_total` on counters, HELP and TYPE for every
// family. A reading that is not there is left out (Prometheus's "n/a"), never written as 0.
// Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <string>

#include "gpufeed/monitor_types.h"

namespace gpufeed {

struct MonitorCounters {
  uint64_t samples = 0;
  uint64_t warnings = 0;
  bool nvml_loaded = false;
};

// `latest` may be null before the first sample.
std::string RenderPrometheusText(const MonitorSnapshot* latest, const MonitorCounters& counters);

}  // namespace gpufeed
