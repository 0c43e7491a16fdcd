#include "pipeline/groups/group_packer.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "gpufeed/error.h"
#include "pipeline/random.h"

namespace gpufeed {
namespace {

// Batches first-fit still considers: enough for the gaps of a window's large groups to meet
// its small ones, few enough that a batch's groups lie near each other in the file.
constexpr size_t kOpenBins = 16;

// Groups per packing window (options.window; 0 = groups for about 4 batches, at least 64).
int64_t PackWindow(const GroupTable& t, const std::vector<int64_t>& groups,
                   const GroupPackOptions& options) {
  if (options.window > 0) return options.window;
  const int64_t mean =
      groups.empty() ? 1 : std::max<int64_t>(1, t.num_rows() / static_cast<int64_t>(groups.size()));
  return std::max<int64_t>(64, 4 * options.batch_size / mean);
}

}  // namespace

GroupPacker::Packing GroupPacker::Pack(const GroupTable& t, const std::vector<int64_t>& groups,
                                       int64_t cap, int64_t window) {
  Packing packing;
  std::vector<Bin>& bins = packing.bins;
  std::vector<std::pair<size_t, size_t>>& units = packing.units;
  std::vector<int64_t> free;
  std::vector<size_t> open;  // bins with room, oldest first
  const auto open_bin = [&](size_t bin) {
    if (free[bin] == 0) return;
    if (open.size() == kOpenBins) open.erase(open.begin());
    open.push_back(bin);
  };
  for (size_t start = 0; start < groups.size(); start += static_cast<size_t>(window)) {
    const size_t end = std::min(groups.size(), start + static_cast<size_t>(window));
    std::vector<int64_t> batch(groups.begin() + static_cast<std::ptrdiff_t>(start),
                               groups.begin() + static_cast<std::ptrdiff_t>(end));
    std::stable_sort(batch.begin(), batch.end(),
                     [&](int64_t a, int64_t b) { return t.GroupSize(a) > t.GroupSize(b); });
    for (int64_t g : batch) {
      const int64_t size = t.GroupSize(g);
      if (size > cap) {
        const int64_t full = size / cap;
        const int64_t rest = size % cap;
        const size_t first = bins.size();
        for (int64_t k = 0; k < full; ++k) {
          bins.push_back({Part{g, k * cap, cap, rest == 0 && k == full - 1}});
          free.push_back(0);
        }
        if (rest > 0) {
          bins.push_back({Part{g, full * cap, rest, true}});
          free.push_back(cap - rest);
          open_bin(bins.size() - 1);
        }
        units.emplace_back(first, bins.size());
        continue;
      }
      auto fit = std::find_if(open.begin(), open.end(), [&](size_t b) { return free[b] >= size; });
      if (fit != open.end()) {
        const size_t b = *fit;
        bins[b].push_back(Part{g, 0, size, true});
        free[b] -= size;
        if (free[b] == 0) open.erase(fit);
        continue;
      }
      bins.push_back({Part{g, 0, size, true}});
      free.push_back(cap - size);
      units.emplace_back(bins.size() - 1, bins.size());
      open_bin(bins.size() - 1);
    }
  }
  return packing;
}

std::vector<std::vector<GroupPacker::Bin>> GroupPacker::DealUnits(const Packing& packing,
                                                                  int world_size, int rank,
                                                                  std::vector<int64_t>& load) {
  load.assign(static_cast<size_t>(world_size), 0);
  std::vector<std::vector<Bin>> mine;
  for (const auto& [first, last] : packing.units) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += static_cast<int64_t>(last - first);
    if (r == static_cast<size_t>(rank)) {
      mine.emplace_back(packing.bins.begin() + static_cast<std::ptrdiff_t>(first),
                        packing.bins.begin() + static_cast<std::ptrdiff_t>(last));
    }
  }
  return mine;
}

void GroupPacker::SplitOneBatch(std::vector<std::vector<Bin>>& mine) {
  size_t best_unit = 0, best_bin = 0, best_parts = 0;
  for (size_t u = 0; u < mine.size(); ++u) {
    for (size_t b = 0; b < mine[u].size(); ++b) {
      if (mine[u][b].size() > best_parts) {
        best_parts = mine[u][b].size();
        best_unit = u;
        best_bin = b;
      }
    }
  }
  Bin moved;
  if (best_parts >= 2) {
    Bin& bin = mine[best_unit][best_bin];
    // Whole groups move: the later half of the batch's groups make a batch of their own.
    moved.assign(bin.begin() + static_cast<std::ptrdiff_t>(best_parts / 2), bin.end());
    bin.resize(best_parts / 2);
  } else {
    // Every batch holds one part: split the longest in two, in order.
    int64_t longest = 0;
    for (size_t u = 0; u < mine.size(); ++u) {
      for (size_t b = 0; b < mine[u].size(); ++b) {
        if (mine[u][b][0].length > longest) {
          longest = mine[u][b][0].length;
          best_unit = u;
          best_bin = b;
        }
      }
    }
    // rows_ >= target > count: some batch holds two rows or more.
    GPUFEED_ASSERT(longest >= 2, "a part to split");
    Part& part = mine[best_unit][best_bin][0];
    const int64_t head = part.length / 2;
    moved.push_back(Part{part.group, part.offset + head, part.length - head, part.complete});
    part.length = head;
    part.complete = false;
  }
  std::vector<Bin>& target_unit = mine[best_unit];
  target_unit.insert(target_unit.begin() + static_cast<std::ptrdiff_t>(best_bin) + 1,
                     std::move(moved));
}

GroupPacker::GroupPacker(std::shared_ptr<const GroupTable> table, GroupPackOptions options)
    : table_(std::move(table)), options_(options) {
  const int64_t cap = options_.batch_size;
  if (cap <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("batch_size must be positive, got {}", cap));
  }
  if (options_.world_size <= 0 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("rank {} is outside [0, world_size={})",
                                                         options_.rank, options_.world_size));
  }
  const GroupTable& t = *table_;
  std::vector<int64_t> groups;
  for (int64_t g = 0; g < t.num_groups(); ++g) {
    if (t.GroupSize(g) > 0) groups.push_back(g);
  }
  // The packing over every rank's groups: bins, and units of consecutive bins.
  const Packing packing = Pack(t, groups, cap, PackWindow(t, groups, options_));
  // Deal the units: each to the rank with the fewest batches so far (the lowest on ties).
  std::vector<int64_t> load;
  std::vector<std::vector<Bin>> mine = DealUnits(packing, options_.world_size, options_.rank, load);
  int64_t count = load[static_cast<size_t>(options_.rank)];
  for (const auto& unit : mine) {
    for (const Bin& bin : unit) {
      for (const Part& p : bin) rows_ += p.length;
    }
  }
  const int64_t target = *std::max_element(load.begin(), load.end());
  if (options_.pad && count < target) {
    if (rows_ < target) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("packed groups over {} ranks: rank {} gets {} rows of {} ({}), "
                      "fewer than the {} batches every rank must run; use pad=False "
                      "(ranks of unequal batch counts) or fewer ranks",
                      options_.world_size, options_.rank, rows_, t.num_rows(), t.name(), target));
    }
    // Split batches until this rank runs as many as the others.
    for (; count < target; ++count) SplitOneBatch(mine);
  }
  unit_starts_.push_back(0);
  for (auto& unit : mine) {
    for (Bin& bin : unit) bins_.push_back(std::move(bin));
    unit_starts_.push_back(static_cast<int64_t>(bins_.size()));
  }
}

double GroupPacker::fill() const {
  if (bins_.empty()) return 0.0;
  return static_cast<double>(rows_) /
         (static_cast<double>(bins_.size()) * static_cast<double>(options_.batch_size));
}

EpochPlan GroupPacker::Plan(int64_t epoch) const {
  const GroupTable& t = *table_;
  const auto units = static_cast<int64_t>(unit_starts_.size()) - 1;
  std::vector<int64_t> unit_order(static_cast<size_t>(units));
  std::iota(unit_order.begin(), unit_order.end(), int64_t{0});
  std::vector<int64_t> slot_group;  // the group each slot holds this epoch; empty: itself
  if (options_.shuffle) {
    const uint64_t epoch_seed = MixSeed(options_.seed, static_cast<uint64_t>(epoch));
    // Groups of equal size trade places: the same draw on every rank.
    Pcg32 rng(epoch_seed);
    std::vector<int64_t> by_size(static_cast<size_t>(t.num_groups()));
    std::iota(by_size.begin(), by_size.end(), int64_t{0});
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](int64_t a, int64_t b) { return t.GroupSize(a) < t.GroupSize(b); });
    std::vector<int64_t> shuffled = by_size;
    for (size_t begin = 0; begin < shuffled.size();) {
      size_t end = begin + 1;
      const int64_t size = t.GroupSize(shuffled[begin]);
      while (end < shuffled.size() && t.GroupSize(shuffled[end]) == size) ++end;
      Shuffle(shuffled.data() + begin, static_cast<int64_t>(end - begin), rng);
      begin = end;
    }
    slot_group.resize(by_size.size());
    for (size_t i = 0; i < by_size.size(); ++i) {
      slot_group[static_cast<size_t>(by_size[i])] = shuffled[i];
    }
    Pcg32 unit_rng(MixSeed(epoch_seed, 0x5eed0000ULL + static_cast<uint64_t>(options_.rank)));
    Shuffle(unit_order.data(), units, unit_rng);
  }
  EpochPlan plan;
  plan.order.reserve(static_cast<size_t>(rows_));
  plan.batch_starts.reserve(bins_.size() + 1);
  plan.group_starts.reserve(bins_.size() + 1);
  plan.batch_starts.push_back(0);
  plan.group_starts.push_back(0);
  for (int64_t u : unit_order) {
    for (int64_t b = unit_starts_[static_cast<size_t>(u)];
         b < unit_starts_[static_cast<size_t>(u) + 1]; ++b) {
      const int64_t batch_start = static_cast<int64_t>(plan.order.size());
      for (const Part& p : bins_[static_cast<size_t>(b)]) {
        const int64_t g = slot_group.empty() ? p.group : slot_group[static_cast<size_t>(p.group)];
        const int64_t begin = static_cast<int64_t>(plan.order.size()) - batch_start;
        for (int64_t k = p.offset; k < p.offset + p.length; ++k) plan.order.push_back(t.Row(g, k));
        plan.groups.push_back(BatchGroup{g, begin, begin + p.length, p.offset, p.complete});
      }
      plan.batch_starts.push_back(static_cast<int64_t>(plan.order.size()));
      plan.group_starts.push_back(static_cast<int64_t>(plan.groups.size()));
    }
  }
  return plan;
}

}  // namespace gpufeed
