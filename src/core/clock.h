// SteadyNowNs: the steady clock's reading in nanoseconds, the one time base of the loader's
// stage stamps and timings (BatchTiming, the stage trace, the wait attribution), so stamps
// taken in different files subtract. Not wall time: it says nothing about the date and does
// not jump when the system clock is set.
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

namespace gpufeed {

inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace gpufeed
