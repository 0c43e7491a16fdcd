// Sampler: the plan of an epoch. Which samples, in which order, in which batches, for this
// rank. Seeded: the same seed and epoch give the same order on any machine, with any number
// of workers. The order is never stored: the sample at a position is a keyed permutation of
// the position (a Feistel network keyed by seed and epoch, src/pipeline/sampler_permutation.h),
// so a data set of billions of samples costs no memory per sample, and a batch anywhere in an
// epoch (a resumed run) costs as much to plan as the first.
//
// Sharding follows PyTorch's DistributedSampler: the epoch's order is dealt round-robin to
// `world_size` ranks. Every rank gets the same number of samples, so every rank runs the same
// number of steps (a rank with one step more would pair its all-reduce with another rank's
// next epoch and hang the job): without drop_last the order is padded to a multiple of
// world_size by repeating samples from its start (as DistributedSampler does; 3 samples over
// 4 ranks give every rank one sample), so a few samples are seen twice per epoch; with
// drop_last it is cut to a multiple of world_size and each shard's last partial batch is
// dropped. `pad = false` turns the padding off: every sample exactly once, shards of unequal
// length (for evaluation where each rank's results are gathered without collectives).
//
// Block shuffle (for compressed, chunked data): the samples are cut into blocks of
// `shuffle_block` consecutive samples (an HDF5 chunk), the blocks are shuffled, and samples
// are shuffled within windows of `shuffle_window` consecutive blocks. A batch then touches
// about batch_size / shuffle_block * (1 + 1 / shuffle_window) chunks instead of one chunk
// per sample, at the cost of a weaker shuffle: samples of one chunk land within
// shuffle_window chunks' worth of each other in the epoch.
//
// Resuming at another world size: the epoch's global order (before dealing) is a function of
// (seed, epoch, the data set's sample count, the shuffle mode) and never of the world size or
// the rank. When every rank has taken k batches of an epoch, the ranks together have consumed
// a prefix of that order, GlobalConsumed() long. Plan(epoch, start) deals what is left,
// positions [start, num_samples()), round-robin to this sampler's ranks with the same rules
// (padded to equal shards by repeating the remainder from its start, or cut with drop_last),
// so a run saved at one world size goes on at another with no sample repeated beyond the
// padding and none skipped. Packed groups are dealt by a packing of every rank's groups that
// depends on the world size: they resume at another world size only at an epoch's boundary.
//
// Thread-safety: immutable after construction; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gpufeed/groups.h"
#include "gpufeed/loader_options.h"

namespace gpufeed {

class GroupPacker;
class EpochShuffle;
struct ShuffleWindowCache;

// The plan's options, as the loader passes them on (ToSamplerOptions): the defaults are
// LoaderOptions' (gpufeed/loader_options.h), written there once.
struct SamplerOptions {
  int64_t batch_size = 0;  // Required: > 0
  bool shuffle = LoaderOptions{}.shuffle;
  uint64_t seed = LoaderOptions{}.seed;
  bool drop_last = LoaderOptions{}.drop_last;
  bool pad = LoaderOptions{}.pad;  // shards padded to equal length (see above)
  int rank = LoaderOptions{}.rank;
  int world_size = LoaderOptions{}.world_size;
  int64_t shuffle_block = 0;  // 0 = full shuffle; > 0: block shuffle (above)
  int shuffle_window = LoaderOptions{}.shuffle_window;
  // Default: null. Packed groups (gpufeed/groups.h): batches of whole groups, packed as
  // src/pipeline/group_packer.h says (shuffle moves groups, not rows; shards are dealt at
  // group granularity; drop_last and shuffle_block do not apply). The table's row count must
  // be the sample count.
  std::shared_ptr<const GroupTable> groups = {};
  int64_t pack_window = 0;  // Default: 0 = automatic: groups for about 4 batches, at least 64
};

// One epoch of a rank. A plain plan is the epoch's number alone: each batch's samples are
// computed when it is built (a keyed permutation, so a plan costs no memory per sample). A plan
// of packed groups holds the packing's samples, where each batch starts and the group parts
// each batch holds.
struct EpochPlan {
  int64_t epoch = 0;
  // Plain plans: positions of the epoch's global order consumed before this plan, by ranks at
  // any world size (a run resumed at another world size); the plan deals the rest. 0: the
  // whole epoch.
  int64_t start = 0;
  std::vector<int64_t> order = {};         // packed: the samples in delivery order
  std::vector<int64_t> batch_starts = {};  // packed: batches + 1 offsets into `order`
  std::vector<BatchGroup> groups = {};     // packed: every batch's parts, batch after batch
  std::vector<int64_t> group_starts = {};  // packed: batches + 1 offsets into `groups`
};

class Sampler {
 public:
  // Throws Error(kInvalidArgument) for batch_size <= 0, rank outside [0, world_size),
  // world_size <= 0, a negative shuffle_block, shuffle_window <= 0, or a bad $RANK.
  Sampler(int64_t num_samples, SamplerOptions options);

  const SamplerOptions& options() const { return options_; }
  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  int64_t num_samples() const { return num_samples_; }
  // Samples this rank sees per epoch (after drop_last).
  int64_t shard_size() const { return shard_size_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // The sample at position `i` of this rank's shard of `epoch` (batch b holds positions
  // [b * batch_size, min((b + 1) * batch_size, shard_size()))). Constant time and memory.
  // REQUIRES: no packed groups; 0 <= i < shard_size().
  int64_t SampleAt(int64_t epoch, int64_t i) const;
  // This rank's samples of `epoch`, in delivery order: shard_size() of them, so memory per
  // sample (for tests and tools over small data sets; the loader computes batch by batch).
  // Throws Error(kInvalidArgument) when the order would not fit in physical RAM.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // The epoch's plan: its number, or with packed groups the packing's whole plan. `start` > 0
  // deals only positions [start, num_samples()) of the epoch's global order (see above).
  // Throws Error(kInvalidArgument) for `start` outside [0, num_samples()], or > 0 with packed
  // groups.
  EpochPlan Plan(int64_t epoch, int64_t start = 0) const;
  // This rank's batches and samples in `plan` (batches_per_epoch() and shard_size() unless the
  // plan has a start).
  int64_t BatchesOf(const EpochPlan& plan) const;
  int64_t ShardOf(const EpochPlan& plan) const;
  // Positions of the epoch's global order consumed once every rank has taken `batches`
  // batches of `plan` (the plan's start included), in [0, num_samples()]. After the last batch
  // with drop_last: num_samples() (the samples drop_last left out are the epoch's loss).
  // -1 for packed groups past an epoch's boundary: they have no position in a global order.
  int64_t GlobalConsumed(const EpochPlan& plan, int64_t batches) const;
  // The samples of batch `batch` of `plan`, in row order. REQUIRES: 0 <= batch <
  // BatchesOf(plan).
  std::vector<int64_t> BatchOf(const EpochPlan& plan, int64_t batch) const;
  // How many samples batch `batch` of `plan` holds (constant time).
  int64_t BatchRows(const EpochPlan& plan, int64_t batch) const;
  // The group parts of batch `batch` (none unless packing groups).
  std::span<const BatchGroup> GroupsOf(const EpochPlan& plan, int64_t batch) const;
  // The packing, or null.
  const GroupPacker* packer() const { return packer_.get(); }

 private:
  struct Deal {
    int64_t shard = 0;
    int64_t batches = 0;
  };
  // This rank's share of `remaining` positions dealt round-robin (padded or cut as the options
  // say).
  Deal DealOf(int64_t remaining) const;
  EpochShuffle ShuffleOf(int64_t epoch) const;  // the order before sharding
  // This rank's i-th sample of the positions from `start` on.
  int64_t SampleAt(const EpochShuffle& shuffle, int64_t start, int64_t i,
                   ShuffleWindowCache& cache) const;

  SamplerOptions options_;
  int64_t num_samples_;
  int64_t shard_size_ = 0;
  int64_t batches_per_epoch_ = 0;
  std::shared_ptr<const GroupPacker> packer_;
};

}  // namespace gpufeed
