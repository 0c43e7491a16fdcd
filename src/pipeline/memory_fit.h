// The loader's batch buffers in flight, fitted to the memory the process may still allocate.
// Batch buffers are the loader's largest allocation: workers build into one each, prefetched
// batches wait in one each, and the consumer holds some. With rows of a gigabyte, a count of
// batches is not a bound: the buffers in flight are sized in bytes against the RAM available
// (within the cgroup) and the address-space limit (RLIMIT_AS), leaving room for one batch of
// the caller's own (a copy of a tensor). What the caller left to the defaults is lowered to
// fit, with one warning; a read that cannot fit is refused before anything is allocated,
// naming the fields, the row size, the batch, the buffers in flight, the limit found, and
// what would fit. Thread-safety: functions of their arguments (MemoryRoom::Now reads /proc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/system/system_memory.h"
#include "gpufeed/loader_options.h"
#include "gpufeed/schema.h"

namespace gpufeed {

// The largest host batch buffer the loader faults in while it opens; a larger one is faulted
// in by the worker that first builds into it.
inline constexpr size_t kEagerHostBuffer = size_t{64} << 20;

// What the process may allocate, and where that figure comes from (for messages).
struct MemoryRoom {
  uint64_t allocatable = 0;  // 0: unknown; nothing is checked
  uint64_t available_ram = 0;
  std::optional<AddressSpace> address_space;
  static MemoryRoom Now();
  // "the address-space limit (RLIMIT_AS, ulimit -v) of 8.2 GB, 735 MB of it in use; 21 GB
  // of RAM available"
  std::string Describe() const;
};

// The batch the buffers hold.
struct BufferShape {
  size_t buffer_bytes = 0;  // one batch buffer
  size_t row_bytes = 0;     // one sample, over all fields (its index is counted apart)
  int64_t rows = 0;         // samples a buffer holds
  const Schema* schema = nullptr;
  bool host_batches = true;  // false: batches live on a device, staged through host buffers
};

// Which of the in-flight counts the caller set (the others may be lowered to fit).
struct ChosenCounts {
  bool workers = false;
  bool prefetch = false;
};

// Bytes kept aside for everything else the process allocates while it reads (thread stacks,
// malloc arenas, decoded-chunk caches): 256 MiB and a sixteenth of what is allocatable.
uint64_t MemoryMargin(uint64_t allocatable);

// Lowers o's defaulted workers, prefetch and max_outstanding until the buffers in flight and
// one batch of the caller's own fit `room` (less MemoryMargin), logging one warning when it
// lowers anything. Error(kInvalidArgument) when even the fewest buffers cannot fit.
void FitBuffersInMemory(LoaderOptions& o, const ChosenCounts& chosen, const BufferShape& shape,
                        const MemoryRoom& room);

// The most bytes of batch buffers the pool may grow to for a consumer holding more batches
// than planned: o.held_budget_bytes where set, else 10% of RAM within half of `allocatable`
// (MemoryRoom::allocatable; a quarter of the free device memory for device batches); never
// less than `planned_buffers` buffers.
int64_t HeldBudgetBytes(const LoaderOptions& o, size_t buffer_bytes, int planned_buffers,
                        uint64_t allocatable);

}  // namespace gpufeed
