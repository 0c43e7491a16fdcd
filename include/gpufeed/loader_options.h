// LoaderOptions: what a Loader is asked to do (batch size, shuffle and seed, sharding,
// workers and prefetch, the held-batch budget, autotuning, the device, transforms, the stage
// trace and grouped packing), each field with its default. A plain value type; the loader
// checks and resolves it once, at construction (Loader::options() returns the values in force).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/device.h"
#include "gpufeed/groups.h"
#include "gpufeed/transforms.h"

namespace gpufeed {

struct LoaderOptions {
  int64_t batch_size = 0;  // Required: > 0
  bool shuffle = true;     // Default: true: a new order every epoch, seeded
  uint64_t seed = 0;       // Default: 0
  bool drop_last = false;  // Default: false: the last batch may be short
  // Default: true: every rank's shard padded to the same length by repeating samples from the
  // start of the epoch's order, as torch's DistributedSampler does, so every rank runs the same
  // number of steps. False: every sample exactly once, shards of unequal length (evaluation).
  bool pad = true;
  int rank = -1;        // Default: -1 = $RANK, else 0
  int world_size = -1;  // Default: -1 = $WORLD_SIZE, else 1
  // Default: 0 = full shuffle. > 0: block shuffle for chunked data: blocks of this many
  // consecutive samples (an HDF5 chunk) are shuffled, then samples within windows of
  // shuffle_window blocks; < 0: the source's PreferredBlock().
  int64_t shuffle_block = 0;
  int shuffle_window = 4;  // Default: 4 blocks per within-window shuffle
  int workers = 0;         // Default: 0 = min(4, hardware threads, max_workers if set)
  // Default: 0 = 2 * workers, within 128 MiB of batches but at least 2 (and within
  // max_prefetch if set): batches kept ready beyond the workers'
  int prefetch = 0;
  // Default: 3 batches the consumer may hold when it asks for more, planned for up front: a
  // Python loop still holds the last batch in its loop variable when it asks for the next, and
  // one kept for logging plus a spare should not grow the pool. A consumer that holds more
  // (keeps batches, or tensors of them, for metrics) makes the pool grow by one batch buffer
  // per extra batch held, with one warning naming the cost, up to held_budget_bytes of batch
  // buffers in all; past that Next() throws.
  int max_outstanding = 3;
  // Default: 0 = 10% of RAM (at most half of what is available) for host batches, a quarter
  // of the free device memory for device batches; never less than the planned pool.
  int64_t held_budget_bytes = 0;
  // Default: false. True: workers and prefetch are tuned online (hill climbing on measured
  // consumer wait and throughput) within max_workers and max_prefetch, starting from
  // `workers` and `prefetch`; every change is logged with its reason (stats().tuning_log).
  bool autotune = false;
  int max_workers = 0;                  // Default: 0 = the CPU count (the cgroup quota where lower)
  int max_prefetch = 0;                 // Default: 0 = 4 * max_workers, within 25% of available RAM
  std::shared_ptr<Device> device = {};  // Default: null = the host
  std::vector<std::shared_ptr<Transform>> transforms = {};  // Default: none
  int64_t start_epoch = 0;                                  // Default: 0
  // Default: "" = no file. A path: the stage trace (Loader::WriteTrace) is written there when
  // the loader is destroyed.
  std::string trace = {};
  // The batches the stage trace keeps. Default: 0 = those of the last minute (at most 65536);
  // n > 0: the last n (at most 65536); -1: none (no recording at all).
  int64_t trace_batches = 0;
  // Default: null. Grouped data (gpufeed/groups.h), with pack = true: batches of whole groups
  // (packed as src/pipeline/group_packer.h says; every row once per epoch, shuffle moves
  // groups), each listing its groups (Batch::groups()) and carrying an int64 field "group"
  // (the group of each row). drop_last does not apply.
  std::shared_ptr<const GroupTable> groups = {};
  bool pack = false;        // Default: false; required (true) with groups
  int64_t pack_window = 0;  // Default: 0 = automatic (groups for about 4 batches)
};

}  // namespace gpufeed
