// The calling thread's run-queue delay: how long the kernel kept it runnable but not running
// (the second field of /proc/thread-self/schedstat, in nanoseconds). The loader reads it
// around each worker's batch and the consumer's wait, so the doctor can tell a CPU-starved
// pipeline (threads ready to work, cores taken by others) from a slow stage.
// Thread-safety: each thread reads its own counter through its own descriptor (thread_local).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpufeed {

// The run-queue delay of the calling thread so far, in nanoseconds; -1 where the kernel has
// no schedstat (CONFIG_SCHED_INFO off) or /proc is not mounted.
int64_t ThreadRunqueueNs();

// The second field of a schedstat line ("exec_ns runqueue_ns timeslices"); nullopt for text
// that is not one.
std::optional<int64_t> ParseSchedstatRunqueue(std::string_view text);

}  // namespace gpufeed
