// A whole chunk of a remote object is fetched once however many workers want it at the same
// time: a worker wanting a chunk another worker is fetching waits for that fetch, and a failed
// fetch leaves each waiter to read what it needs itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/fixture.h"

namespace gpufeed {
namespace {

// Files that read as a remote object's (no mapping, a batch key) and record every range their
// ReadMany is asked for. Once armed, the first ReadMany with ranges stops at a gate until the
// test opens it, or until a second one arrives (a worker fetching again what the first is
// fetching: the test then fails on the ranges, instead of hanging). A range at `fail_at`
// fails, once, while `fail_at` is set.
class GatedFiles final : public FileSystem {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool armed = false;
    bool open = true;
    int gated_calls = 0;
    uint64_t fail_at = UINT64_MAX;
    int reads_in_flight = 1;
    std::map<std::pair<uint64_t, size_t>, int> ranges;  // (offset, bytes) -> times read
  };

  class GatedFile final : public File {
   public:
    GatedFile(std::unique_ptr<File> local, std::shared_ptr<State> state)
        : local_(std::move(local)), state_(std::move(state)) {}
    const std::string& path() const override { return local_->path(); }
    uint64_t Size() const override { return local_->Size(); }
    const std::byte* Map() const override { return nullptr; }
    const void* BatchKey() const override { return state_.get(); }
    int ReadsInFlight() const override { return state_->reads_in_flight; }
    size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
      return local_->ReadAt(offset, buf, n);
    }
    void ReadMany(std::span<const ReadRange> ranges, const std::string& what) const override {
      if (ranges.empty()) return;
      {
        std::unique_lock lock(state_->mu);
        for (const ReadRange& r : ranges) ++state_->ranges[{r.offset, r.n}];
        if (state_->armed) {
          if (++state_->gated_calls == 1) {
            state_->open = false;
            state_->cv.notify_all();
            state_->cv.wait(lock, [&] { return state_->open || state_->gated_calls > 1; });
          } else {
            state_->open = true;
            state_->cv.notify_all();
          }
        }
        for (const ReadRange& r : ranges) {
          if (r.offset == state_->fail_at) {
            state_->fail_at = UINT64_MAX;
            throw Error(ErrorCode::kIo, "injected: the store reset the connection");
          }
        }
      }
      for (const ReadRange& r : ranges) ReadFully(*local_, r.offset, r.buf, r.n, what);
    }

   private:
    const std::unique_ptr<File> local_;
    const std::shared_ptr<State> state_;
  };

  std::unique_ptr<File> Open(const std::string& path) const override {
    return std::make_unique<GatedFile>(PosixFileSystem()->Open(path), state_);
  }
  PathType Type(const std::string& path) const override { return PosixFileSystem()->Type(path); }
  std::vector<DirEntry> List(const std::string& path) const override {
    return PosixFileSystem()->List(path);
  }

  State& state() const { return *state_; }
  // Waits until the gated ReadMany is at the gate.
  void WaitGated() const {
    std::unique_lock lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->gated_calls > 0; });
  }
  void Open() const {
    std::lock_guard lock(state_->mu);
    state_->open = true;
    state_->cv.notify_all();
  }

 private:
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

// userblock.h5 `c`: float32 (100, 4) in unfiltered chunks of 8 rows.
constexpr int64_t kRowBytes = 4 * 4;

std::vector<std::byte> ReadRows(const Source& source, const std::vector<int64_t>& indices) {
  std::vector<std::byte> rows(indices.size() * kRowBytes);
  BatchView view{{rows.data()}, static_cast<int64_t>(indices.size())};
  source.Read(indices, view, source.NewWorkerState().get());
  return rows;
}

std::vector<std::byte> Expected(const std::string& bytes, const std::vector<int64_t>& indices) {
  std::vector<std::byte> rows(indices.size() * kRowBytes);
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(rows.data() + i * kRowBytes, bytes.data() + indices[i] * kRowBytes, kRowBytes);
  }
  return rows;
}

// Polls (no clock: it only yields) until a worker waits for another's fetch or a second
// ReadMany opened the gate.
void WaitForWaiterOrSecondFetch(const Source& source, const GatedFiles& fs) {
  while (Hdf5SourceCounters(source).chunk_fetch_waits == 0) {
    {
      std::lock_guard lock(fs.state().mu);
      if (fs.state().gated_calls > 1) return;
    }
    std::this_thread::yield();
  }
}

// Reads `first` on one thread, whose fetch the gate holds; runs `while_held`; then reads
// `second` on another, until it waits for the first's fetch (or fetched itself), and opens the
// gate. Both reads must give their rows, and exactly one of them must have waited.
void ReadTwoOverOneFetch(const Source& source, GatedFiles& fs, const std::string& expected,
                         const std::vector<int64_t>& first, const std::vector<int64_t>& second,
                         const std::function<void()>& while_held = {}) {
  std::vector<std::byte> got_first;
  std::vector<std::byte> got_second;
  std::thread a([&] { got_first = ReadRows(source, first); });
  fs.WaitGated();
  if (while_held) while_held();
  std::thread b([&] { got_second = ReadRows(source, second); });
  WaitForWaiterOrSecondFetch(source, fs);
  fs.Open();
  a.join();
  b.join();
  EXPECT_EQ(got_first, Expected(expected, first));
  EXPECT_EQ(got_second, Expected(expected, second));
  EXPECT_EQ(Hdf5SourceCounters(source).chunk_fetch_waits, 1);
}

TEST(Hdf5FetchOnceTest, ReadsAheadAsManyChunksAsTheStoreTakesWithinAQuarterOfTheCache) {
  // userblock.h5 `c`: chunks of 8 rows, 13 of them (1,664 bytes decoded, 16 per sample).
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto fs = std::make_shared<GatedFiles>();
  fs->state().reads_in_flight = 6;
  // A cache that holds them all many times over: 6 requests' worth of chunks, 48 rows.
  auto roomy = OpenHdf5({files->File("userblock")}, {"c"},
                        {.file_system = fs, .chunk_cache_bytes = 1 << 20});
  EXPECT_TRUE(roomy->ReadsAhead());
  EXPECT_EQ(roomy->ReadAheadSamples(), 48);
  // The default cache holds the decoded set, 1,664 bytes: a quarter of it is 26 rows.
  auto snug = OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = fs});
  EXPECT_EQ(snug->ReadAheadSamples(), 1664 / 4 / 16);
  // A local file reads nothing ahead.
  auto local = OpenHdf5({files->File("userblock")}, {"c"});
  EXPECT_FALSE(local->ReadsAhead());
  EXPECT_EQ(local->ReadAheadSamples(), 0);
}

TEST(Hdf5FetchOnceTest, AWorkerWantingAChunkBeingFetchedWaitsForThatFetch) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto fs = std::make_shared<GatedFiles>();
  auto source = OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = fs});
  const std::string expected = files->Expected("userblock", "c");
  fs->state().armed = true;
  const std::vector<int64_t> first = {7, 0, 1, 2, 3, 4, 5, 6};  // chunk 0 whole
  const std::vector<int64_t> second = {6, 1, 3, 5, 0};          // most of chunk 0
  ReadTwoOverOneFetch(*source, *fs, expected, first, second);   // the first fetches chunk 0
  ASSERT_EQ(fs->state().ranges.size(), 1u);                     // chunk 0, once
  EXPECT_EQ(fs->state().ranges.begin()->second, 1);
  EXPECT_EQ(fs->state().ranges.begin()->first.second, 8u * kRowBytes);
  // The chunk is kept: a later batch reads nothing.
  EXPECT_EQ(ReadRows(*source, second), Expected(expected, second));
  EXPECT_EQ(fs->state().ranges.size(), 1u);
  EXPECT_EQ(fs->state().ranges.begin()->second, 1);
}

TEST(Hdf5FetchOnceTest, WhenTheFetchFailsTheWaiterReadsItsRowsItself) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto fs = std::make_shared<GatedFiles>();
  auto source = OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = fs});
  const std::string expected = files->Expected("userblock", "c");
  const std::vector<int64_t> first = {8, 9, 10, 11, 12, 13, 14, 15};  // chunk 1 whole
  const std::vector<int64_t> second = {15, 9, 11, 13, 8};
  // Chunk 1's whole range fails once: the fetching worker reads its rows alone, the waiter
  // its own (the fetch it waited for handed it nothing).
  {
    std::lock_guard lock(fs->state().mu);
    fs->state().armed = true;
  }
  ReadTwoOverOneFetch(*source, *fs, expected, first, second, [&] {
    std::lock_guard lock(fs->state().mu);
    fs->state().fail_at = fs->state().ranges.begin()->first.first;  // the gated fetch's range
  });
}

TEST(Hdf5FetchOnceTest, TwoWorkersUnderBlockShuffleReadNoRangeTwice) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto fs = std::make_shared<GatedFiles>();
  auto source = OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = fs});
  const std::string expected = files->Expected("userblock", "c");
  // Two workers taking an epoch's batches in turn, as a loader's do (each told a batch three
  // ahead, to fetch its chunks on the source's prefetch threads), in a block-shuffled
  // order (blocks of a chunk's 8 rows shuffled, then rows shuffled within windows of 4
  // blocks): batches of 16, so two batches at once often share chunks.
  std::vector<int64_t> blocks((source->size() + 7) / 8);
  std::iota(blocks.begin(), blocks.end(), int64_t{0});
  std::mt19937_64 rng(5);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int64_t> order;
  for (size_t w = 0; w < blocks.size(); w += 4) {
    const size_t window_start = order.size();
    for (size_t k = w; k < std::min(blocks.size(), w + 4); ++k) {
      for (int64_t i = blocks[k] * 8; i < std::min(source->size(), blocks[k] * 8 + 8); ++i) {
        order.push_back(i);
      }
    }
    std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(window_start), order.end(), rng);
  }
  ASSERT_EQ(order.size(), 100u);
  std::atomic<size_t> next{0};
  std::vector<std::vector<std::byte>> got((order.size() + 15) / 16);
  auto worker = [&] {
    auto state = source->NewWorkerState();
    for (size_t b; (b = next++) < got.size();) {
      const std::vector<int64_t> idx(
          order.begin() + static_cast<std::ptrdiff_t>(b * 16),
          order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), b * 16 + 16)));
      got[b].resize(idx.size() * kRowBytes);
      BatchView view{{got[b].data()}, static_cast<int64_t>(idx.size())};
      if (b + 3 < got.size()) {  // as a loader tells it: a later batch's samples
        source->ReadAhead(std::span(order).subspan((b + 3) * 16, 16), state.get());
      }
      source->Read(idx, view, state.get());
    }
  };
  std::thread a(worker);
  std::thread b(worker);
  a.join();
  b.join();
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<int64_t> idx(
        order.begin() + static_cast<std::ptrdiff_t>(i * 16),
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i * 16 + 16)));
    EXPECT_EQ(got[i], Expected(expected, idx)) << "batch " << i;
  }
  for (const auto& [range, times] : fs->state().ranges) {
    EXPECT_EQ(times, 1) << "offset " << range.first << ", " << range.second << " bytes";
  }
}

// The chunks a later batch reads whole are fetched on the source's threads once told
// (ReadAhead), and that batch, whether their fetch has ended or not, sends no request of its
// own for them.
TEST(Hdf5FetchOnceTest, ALaterBatchsChunksAreFetchedOnceWhenToldAhead) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  auto fs = std::make_shared<GatedFiles>();
  auto source = OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = fs});
  const std::string expected = files->Expected("userblock", "c");
  const std::vector<int64_t> now = {3, 0, 1, 2, 7, 4, 5, 6};          // chunk 0
  const std::vector<int64_t> later = {15, 9, 10, 11, 12, 13, 14, 8};  // chunk 1
  auto state = source->NewWorkerState();
  source->ReadAhead(later, state.get());
  std::vector<std::byte> rows(now.size() * kRowBytes);
  BatchView view{{rows.data()}, static_cast<int64_t>(now.size())};
  source->Read(now, view, state.get());
  EXPECT_EQ(rows, Expected(expected, now));
  EXPECT_EQ(ReadRows(*source, later), Expected(expected, later));
  std::lock_guard lock(fs->state().mu);
  ASSERT_EQ(fs->state().ranges.size(), 2u);  // chunks 0 and 1, whole, once each
  for (const auto& [range, times] : fs->state().ranges) {
    EXPECT_EQ(range.second, 8u * kRowBytes);
    EXPECT_EQ(times, 1);
  }
}

// A fetch told ahead that fails hands nothing on: the batch reads its rows itself.
TEST(Hdf5FetchOnceTest, AFailedFetchAheadLeavesTheBatchToReadItsRows) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const std::string expected = files->Expected("userblock", "c");
  const std::vector<int64_t> later = {15, 9, 10, 11, 12, 13, 14, 8};  // chunk 1
  uint64_t chunk_at = 0;
  {
    auto probe = std::make_shared<GatedFiles>();
    ReadRows(*OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = probe}), later);
    ASSERT_EQ(probe->state().ranges.size(), 1u);
    chunk_at = probe->state().ranges.begin()->first.first;
  }
  auto fs = std::make_shared<GatedFiles>();
  auto source = OpenHdf5({files->File("userblock")}, {"c"}, {.file_system = fs});
  fs->state().fail_at = chunk_at;  // fails once: the fetch told ahead
  source->ReadAhead(later, source->NewWorkerState().get());
  EXPECT_EQ(ReadRows(*source, later), Expected(expected, later));
}

}  // namespace
}  // namespace gpufeed
