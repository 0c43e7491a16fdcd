#include "sources/varlen/pack_layout.h"

#include <algorithm>
#include <numeric>

#include "core/splitmix.h"
#include "gpufeed/error.h"

namespace gpufeed {

PackStream MakeStream(std::span<const int64_t> lengths, bool eos, bool shuffle, uint64_t seed) {
  const size_t n = lengths.size();
  PackStream stream;
  stream.order.resize(n);
  std::iota(stream.order.begin(), stream.order.end(), int64_t{0});
  if (shuffle) {
    uint64_t state = Mix64(seed ^ 0x7061636b2d646f63ULL);  // "pack-doc"
    for (size_t i = n; i > 1; --i) {
      state += kSplitMixGamma;
      // Lemire's multiply-shift: a draw in [0, i) without a division.
      const auto j =
          static_cast<size_t>((static_cast<unsigned __int128>(SplitMixFinalize(state)) * i) >> 64);
      std::swap(stream.order[i - 1], stream.order[j]);
    }
  }
  stream.prefix.resize(n + 1);
  stream.prefix[0] = 0;
  const int64_t extra = eos ? 1 : 0;
  for (size_t k = 0; k < n; ++k) {
    stream.prefix[k + 1] = stream.prefix[k] + lengths[static_cast<size_t>(stream.order[k])] + extra;
  }
  return stream;
}

void StreamRow(const PackStream& stream, std::span<const int64_t> lengths, bool eos, int64_t length,
               int64_t row, std::vector<PackPiece>& pieces) {
  pieces.clear();
  const int64_t total = stream.prefix.back();
  const int64_t start = row * length;
  const int64_t end = std::min(start + length, total);
  // The sample holding `start`: the last k with prefix[k] <= start (an empty sample before
  // it has prefix[k + 1] == prefix[k] and is passed over).
  auto k = static_cast<size_t>(std::upper_bound(stream.prefix.begin(), stream.prefix.end(), start) -
                               stream.prefix.begin() - 1);
  for (int64_t pos = start; pos < end; ++k) {
    GPUFEED_ASSERT(k < stream.order.size(), "a packed row past the stream");
    const int64_t sample = stream.order[k];
    const int64_t within = pos - stream.prefix[k];
    const int64_t take = std::min(stream.prefix[k + 1], end) - pos;
    if (take <= 0) continue;
    const int64_t items = lengths[static_cast<size_t>(sample)];
    const int64_t item_take = std::max<int64_t>(0, std::min(take, items - within));
    pieces.push_back({.sample = sample,
                      .first = std::min(within, items),
                      .items = item_take,
                      .eos = eos && within + take > items});
    pos += take;
  }
}

namespace {

// The bins' free room in a max tree, so that "the first bin with room >= need" takes
// O(log bins): first-fit in n log n rather than n * bins.
class FirstFit {
 public:
  explicit FirstFit(size_t capacity) {
    while (size_ < capacity) size_ *= 2;
    tree_.assign(2 * size_, -1);
  }
  // The first bin with room >= need, or -1.
  int64_t Find(int64_t need) const {
    if (tree_[1] < need) return -1;
    size_t node = 1;
    while (node < size_) node = tree_[2 * node] >= need ? 2 * node : 2 * node + 1;
    return static_cast<int64_t>(node - size_);
  }
  void Set(size_t bin, int64_t room) {
    size_t node = bin + size_;
    tree_[node] = room;
    for (node /= 2; node >= 1; node /= 2) {
      tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]);
    }
  }
  int64_t Room(size_t bin) const { return tree_[bin + size_]; }

 private:
  size_t size_ = 1;
  std::vector<int64_t> tree_;
};

}  // namespace

PackBins MakeBins(std::span<const int64_t> lengths, bool eos, int64_t length, int64_t window) {
  PackBins bins;
  bins.row_begin.push_back(0);
  const auto n = static_cast<int64_t>(lengths.size());
  const int64_t extra = eos ? 1 : 0;
  std::vector<int64_t> members;
  for (int64_t w = 0; w < n; w += window) {
    const int64_t count = std::min(window, n - w);
    members.resize(static_cast<size_t>(count));
    std::iota(members.begin(), members.end(), w);
    std::stable_sort(members.begin(), members.end(), [&](int64_t a, int64_t b) {
      return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
    });
    FirstFit fit(static_cast<size_t>(count));
    std::vector<std::vector<PackPiece>> rows;
    for (int64_t sample : members) {
      const int64_t items = lengths[static_cast<size_t>(sample)];
      const int64_t need = std::min(items + extra, length);
      const int64_t kept = std::min(items, need);
      bins.truncated_items += items - kept;
      int64_t bin = fit.Find(need);
      if (bin < 0) {
        bin = static_cast<int64_t>(rows.size());
        rows.emplace_back();
        fit.Set(static_cast<size_t>(bin), length);
      }
      rows[static_cast<size_t>(bin)].push_back(
          {.sample = sample, .first = 0, .items = kept, .eos = need > kept});
      fit.Set(static_cast<size_t>(bin), fit.Room(static_cast<size_t>(bin)) - need);
    }
    for (auto& row : rows) {
      // A row's samples in the source's order, as they would read in a stream.
      std::sort(row.begin(), row.end(),
                [](const PackPiece& a, const PackPiece& b) { return a.sample < b.sample; });
      bins.pieces.insert(bins.pieces.end(), row.begin(), row.end());
      bins.row_begin.push_back(static_cast<int64_t>(bins.pieces.size()));
    }
  }
  return bins;
}

}  // namespace gpufeed
