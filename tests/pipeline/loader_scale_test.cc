// A loader over billions of samples: its plan costs no memory per sample, so it opens at once,
// stays small while it runs a shuffled epoch, and resumes anywhere without building an order.
// The data set is synthetic (values computed per sample, nothing stored), so the only memory
// that could grow with the sample count is the loader's own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSamples = int64_t{4'000'000'000};

// VmRSS of this process, in bytes.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::getline(status, key);
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

LoaderOptions Options() {
  LoaderOptions o;
  o.batch_size = 256;
  o.shuffle = true;
  o.seed = 3;
  o.workers = 2;
  o.rank = 0;
  o.world_size = 1;
  return o;
}

std::shared_ptr<Source> OneDimensional() {
  return OpenSynthetic(ParseSchema("x:float32"), kSamples, 1);
}

TEST(LoaderScale, FourBillionSamplesOpenAtOnceAndStaySmall) {
  const int64_t rss_before = ResidentBytes();
  const auto start = std::chrono::steady_clock::now();
  Loader loader(OneDimensional(), Options());
  const double open_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Generous for a loaded machine: what matters is that the open is not linear in the count
  // (an order of 4e9 samples would take tens of seconds and 32 GB).
  EXPECT_LT(open_s, 10.0);
  RecordProperty("open_ms", static_cast<int>(open_s * 1000));
  EXPECT_EQ(loader.batches_per_epoch(), (kSamples + 255) / 256);

  std::set<int64_t> seen;
  bool spread = false;
  for (int b = 0; b < 1000; ++b) {
    auto batch = loader.Next();
    ASSERT_NE(batch, nullptr);
    ASSERT_EQ(batch->size(), 256);
    for (int64_t i : batch->indices()) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, kSamples);
      ASSERT_TRUE(seen.insert(i).second) << "sample " << i << " twice in one epoch";
      spread = spread || i > kSamples / 2;
    }
  }
  EXPECT_TRUE(spread) << "a shuffled epoch's first batches reach the whole data set";
  // The set of seen samples above is the test's own (1000 * 256 entries, ~12 MB): within the
  // bound, which an order of the epoch (32 GB) would pass many times over.
  const int64_t grown = ResidentBytes() - rss_before;
  EXPECT_LT(grown, int64_t{100} << 20) << "RSS grew by " << grown << " bytes";
  RecordProperty("rss_growth_kib", static_cast<int>(grown / 1024));
}

TEST(LoaderScale, ResumesMidEpochWithoutBuildingTheOrder) {
  std::vector<std::vector<int64_t>> expected;
  LoaderState state;
  {
    Loader loader(OneDimensional(), Options());
    loader.SetEpoch(5);
    for (int b = 0; b < 20; ++b) ASSERT_NE(loader.Next(), nullptr);
    state = loader.State();
    for (int b = 0; b < 10; ++b) {
      auto batch = loader.Next();
      ASSERT_NE(batch, nullptr);
      expected.emplace_back(batch->indices().begin(), batch->indices().end());
    }
  }
  LoaderOptions o = Options();
  o.workers = 1;  // the order does not depend on the worker count
  Loader resumed(OneDimensional(), o);
  resumed.Restore(state);
  for (const auto& rows : expected) {
    auto batch = resumed.Next();
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(std::vector<int64_t>(batch->indices().begin(), batch->indices().end()), rows);
  }
  // A batch far into the epoch is as cheap: restore near its end and read past it.
  state.batch = resumed.batches_per_epoch() - 1;
  resumed.Restore(state);
  auto last = resumed.Next();
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->size(), kSamples - (resumed.batches_per_epoch() - 1) * 256);
  EXPECT_EQ(resumed.Next(), nullptr);  // the end of the epoch
}

TEST(LoaderScale, ABatchLargerThanRamIsRefusedWithItsSizes) {
  const auto refused = [](const char* schema, int64_t batch_size) -> std::string {
    LoaderOptions o = Options();
    o.batch_size = batch_size;
    try {
      Loader loader(OpenSynthetic(ParseSchema(schema), batch_size), o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    ADD_FAILURE() << "a batch of " << batch_size << " samples of " << schema << " was accepted";
    return "";
  };
  // 4 MiB samples, 2^28 to a batch: a 1 PiB batch buffer, past any machine's RAM.
  const std::string wide = refused("x:float32[1048576]", int64_t{1} << 28);
  EXPECT_THAT(wide, HasSubstr("a batch of 268435456 samples needs 1125902.1 GB"));
  EXPECT_THAT(wide, HasSubstr("(1125902054326272 bytes)"));
  EXPECT_THAT(wide, HasSubstr("4.2 MB per sample for its fields and 8 B for its index"));
  EXPECT_THAT(wide, HasSubstr("Lower batch_size"));
  // One float per sample, 2^40 to a batch: the sample indices (8 TiB) outweigh the data.
  const std::string narrow = refused("x:float32", int64_t{1} << 40);
  EXPECT_THAT(narrow, HasSubstr("(13194139533312 bytes)"));
  EXPECT_THAT(narrow, HasSubstr("4 B per sample for its fields"));
}

}  // namespace
}  // namespace gpufeed
