// GroupPacker: the plan of packed batches over a GroupTable: whole groups per batch, every
// row exactly once per epoch.
//
// The packing is made once, at construction, from the group sizes in group order: groups
// are taken in windows of `window` groups, sorted by size (largest first, then by id) within
// a window, and placed first-fit into the batches still open (the last 16 opened), so batches
// come out nearly full and groups stay near their place in the file. A group longer than a
// batch fills whole batches of its own, in order, and its remainder opens the next batch
// (first-fit fills the rest of it): its parts are consecutive batches, the last one marked
// complete. The packing is a sequence of batches of "slots" (a slot holds a group of one
// given size).
//
// Ranks: the packing's units (a batch, or the consecutive batches of a split group) are dealt
// to ranks, each to the rank with the fewest batches so far. With pad (the default) every
// rank then runs the same number of batches: a rank short of the most splits batches (one
// holding several groups loses its later groups to a new batch; only when there is none is a
// group split in two, in order). A rank with fewer rows than batches to run is an error.
//
// Epochs: without shuffle every epoch delivers the packing as made. With shuffle, each epoch
// (seeded by seed and epoch, the same on every rank) puts a random group of the same size in
// each slot (groups of equal size trade places, across ranks) and shuffles the order of each
// rank's units. The batch count and fill are therefore the same in every epoch.
//
// Thread-safety: immutable after construction; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gpufeed/groups.h"
#include "pipeline/sampler.h"

namespace gpufeed {

struct GroupPackOptions {
  int64_t batch_size = 0;  // Required: > 0
  bool shuffle = false;    // Default: false
  uint64_t seed = 0;       // Default: 0
  int rank = 0;            // Default: 0
  int world_size = 1;      // Default: 1
  bool pad = true;         // Default: true: every rank runs the same number of batches
  int64_t window = 0;      // Default: 0 = groups for about 4 batches (at least 64)
};

class GroupPacker {
 public:
  // Throws Error(kInvalidArgument) for batch_size <= 0, a rank outside [0, world_size), and
  // (with pad) a rank left with fewer rows than the batches every rank must run.
  GroupPacker(std::shared_ptr<const GroupTable> table, GroupPackOptions options);

  int64_t batches() const { return static_cast<int64_t>(bins_.size()); }
  int64_t rows() const { return rows_; }  // this rank's rows per epoch
  // rows() / (batches() * batch_size): the share of batch capacity used.
  double fill() const;
  const GroupPackOptions& options() const { return options_; }
  EpochPlan Plan(int64_t epoch) const;

 private:
  // Rows [offset, offset + length) of the group in template slot `group` (a group id of the
  // packing as made; an epoch may put another group of the same size there).
  struct Part {
    int64_t group;
    int64_t offset;
    int64_t length;
    bool complete;
  };
  using Bin = std::vector<Part>;
  // The packing over every rank's groups: bins, and units of consecutive bins [first, last).
  struct Packing {
    std::vector<Bin> bins;
    std::vector<std::pair<size_t, size_t>> units;
  };

  // Packs `groups` (group ids, in group order) in windows of `window` groups into batches of
  // `cap` rows, first-fit into the batches still open.
  static Packing Pack(const GroupTable& t, const std::vector<int64_t>& groups, int64_t cap,
                      int64_t window);
  // Deals the packing's units, each to the rank with the fewest batches so far (the lowest on
  // ties); returns `rank`'s units, and in `load` every rank's batch count.
  static std::vector<std::vector<Bin>> DealUnits(const Packing& packing, int world_size, int rank,
                                                 std::vector<int64_t>& load);
  // One batch more: the later half of the groups of the batch holding the most moves to a
  // batch of its own; where every batch holds one part, the longest part splits in two.
  // REQUIRES: some batch holds two rows or more.
  static void SplitOneBatch(std::vector<std::vector<Bin>>& mine);

  std::shared_ptr<const GroupTable> table_;
  GroupPackOptions options_;
  std::vector<Bin> bins_;             // this rank's batches, in the packing's order
  std::vector<int64_t> unit_starts_;  // this rank's units: units + 1 offsets into bins_
  int64_t rows_ = 0;
};

}  // namespace gpufeed
