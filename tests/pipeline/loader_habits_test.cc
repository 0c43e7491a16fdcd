// The loader against the habits DataLoader users bring: holding batches, batch
// sizes past the data set, fork, restoring a foreign state, absurd options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "core/log.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "pipeline/loader_test_util.h"

// A sanitizer runtime in this build, under g++ (__SANITIZE_*__) or clang (__has_feature).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define GPUFEED_TEST_SANITIZER_RUNTIME 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GPUFEED_TEST_SANITIZER_RUNTIME 1
#endif
#endif

namespace gpufeed {
namespace {

using loader_test::CheckedLabels;
using loader_test::Data;
using loader_test::Epoch;
using loader_test::Opts;
using loader_test::TestSource;
using ::testing::HasSubstr;

TEST(Loader, BatchesOutliveTheLoaderAndHoldingMoreGrowsThePoolWithinTheBudget) {
  Data data(100);
  std::unique_ptr<Batch> kept;
  {
    // Holding every batch of an epoch grows the pool, with one warning, and every held
    // batch keeps its own rows.
    std::vector<std::string> warnings;
    const LogSink previous =
        SetLogSink([&](LogLevel, std::string_view message) { warnings.emplace_back(message); });
    LoaderOptions o = Opts(10);
    o.shuffle = false;
    o.max_outstanding = 2;
    Loader loader(data.Open(), o);
    const int planned = loader.stats().buffers;
    std::vector<std::unique_ptr<Batch>> all;
    while (auto batch = loader.Next()) all.push_back(std::move(batch));
    SetLogSink(previous);
    ASSERT_EQ(all.size(), 10U);
    for (size_t b = 0; b < all.size(); ++b) {
      EXPECT_EQ(CheckedLabels(*all[b]).front(), static_cast<int64_t>(b * 10));
    }
    EXPECT_EQ(loader.held_batches(), 10);
    EXPECT_EQ(loader.stats().buffers, planned + 10 - 2);
    ASSERT_EQ(warnings.size(), 1U);
    EXPECT_THAT(warnings[0], HasSubstr("holds 2 batches"));
    EXPECT_THAT(warnings[0], HasSubstr(".clone()"));
    kept = std::move(all.front());
  }
  {
    // Past the budget: an error with the advice, and releasing one lets the loader go on.
    LoaderOptions o = Opts(10, 1);
    o.prefetch = 1;
    o.max_outstanding = 2;
    o.held_budget_bytes = 1;  // no more than the planned pool
    Loader loader(data.Open(), o);
    auto first = loader.Next();
    auto second = loader.Next();
    EXPECT_EQ(loader.held_batches(), 2);
    try {
      loader.Next();
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("2 batches are still referenced"));
      EXPECT_THAT(e.what(), HasSubstr(".clone()"));
    }
    second.reset();
    EXPECT_NE(loader.Next(), nullptr);
  }
  CheckedLabels(*kept);  // still valid memory after the loader is gone
}

// Buffers hold the largest batch this rank's epoch can give, not batch_size rows.
TEST(Loader, BuffersAreSizedByTheLargestBatchOfTheEpoch) {
  Data data(100);
  LoaderOptions o = Opts(int64_t{1} << 40);  // 2**40 x 24 bytes would be 24 TiB
  Loader loader(data.Open(), o);
  EXPECT_LE(loader.stats().buffer_bytes, 100 * 24 + 2 * 256);
  auto batch = loader.Next();
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->size(), 100);
  o.rank = 3;
  o.world_size = 4;
  EXPECT_LE(Loader(data.Open(), o).stats().buffer_bytes, 25 * 24 + 2 * 256);
}

// A loader made before fork() is refused in the child with the fix named; the parent's goes
// on, and a loader made in the child works.
TEST(Loader, ALoaderIsRefusedInAForkedChild) {
  Data data(40);
  auto loader = std::make_unique<Loader>(data.Open(), Opts(10));
  ASSERT_NE(loader->Next(), nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 1;
    try {
      loader->Next();
      code = 2;
    } catch (const Error& e) {
      code = std::string(e.what()).find("Create the loader in the process that iterates it") !=
                     std::string::npos
                 ? 0
                 : 3;
    }
    loader.reset();  // must not hang on threads the child does not have
#if defined(GPUFEED_TEST_SANITIZER_RUNTIME)
    // The sanitizers' runtimes cannot start threads in the child of a multi-threaded fork
    // (ThreadSanitizer refuses; clang's ASan allocator can be left locked by a parent thread
    // and hangs): the child's own loader is checked in the normal build (and by the Python
    // test).
    _exit(code);
#endif
    Loader own(data.Open(), Opts(10));
    int64_t rows = 0;
    while (auto batch = own.Next()) rows += batch->size();
    _exit(code == 0 && rows == 40 ? 0 : 10 + code);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(loader->Next(), nullptr);
}

// Another file of the same length and fields is told apart by its data; the same data read
// from elsewhere (a copy) restores.
TEST(Loader, RestoreRefusesOtherDataOfTheSameLengthAndFields) {
  Data data(100);
  Loader saved(data.Open(), Opts(10));
  saved.Next();
  const LoaderState state = LoaderState::FromJson(saved.State().ToJson());
  ASSERT_TRUE(state.data.has_value());
  EXPECT_THAT(*state.data, ::testing::StartsWith("xxh3:"));

  Data copy(100);  // the same values in other memory
  Loader same(copy.Open(), Opts(10));
  EXPECT_NO_THROW(same.Restore(state));

  Data changed(100);
  changed.x[50 * 4 + 2] += 1;  // the middle sample differs
  Loader other(changed.Open(), Opts(10));
  try {
    other.Restore(state);
    ADD_FAILURE() << "restored over other data";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("saved over other data"));
    EXPECT_THAT(e.what(), HasSubstr(*state.data));
  }
  // A state without the field (saved before it existed) still restores.
  LoaderState old = state;
  old.data.reset();
  EXPECT_NO_THROW(other.Restore(old));
}

// A state records what shapes the plan; restoring it into a loader with another plan fails.
TEST(Loader, RestoreRefusesAnotherDataSetShuffleModeOrDropLast) {
  Data data(100);
  Data other(90);
  Loader saved(data.Open(), Opts(10));
  saved.Next();
  const LoaderState state = LoaderState::FromJson(saved.State().ToJson());
  const auto refused = [&](std::shared_ptr<Source> source, LoaderOptions o,
                           const std::string& what) {
    Loader loader(std::move(source), o);
    try {
      loader.Restore(state);
      ADD_FAILURE() << "restored over another " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  refused(other.Open(), Opts(10), "another file");
  LoaderOptions o = Opts(10);
  o.shuffle = false;
  refused(data.Open(), o, "shuffle");
  o = Opts(10);
  o.shuffle_block = 5;
  refused(data.Open(), o, "shuffle");
  o = Opts(10);
  o.drop_last = true;
  refused(data.Open(), o, "drop_last");
  o = Opts(10);
  o.pad = false;
  refused(data.Open(), o, "pad");
  Loader same(data.Open(), Opts(10));
  same.Restore(state);
  EXPECT_EQ(same.Next()->index(), 1);
}

TEST(Loader, AbsurdWorkerCountsAreClampedWithAMessage) {
  Data data(20);
  std::vector<std::string> warnings;
  const LogSink previous =
      SetLogSink([&](LogLevel, std::string_view message) { warnings.emplace_back(message); });
  Loader loader(data.Open(), Opts(5, 1000));
  SetLogSink(previous);
  EXPECT_LE(loader.workers(), 4 * static_cast<int>(std::thread::hardware_concurrency()) + 16);
  EXPECT_LT(loader.workers(), 1000);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_THAT(warnings[0], HasSubstr("workers=1000"));
  int64_t rows = 0;
  while (auto batch = loader.Next()) rows += batch->size();
  EXPECT_EQ(rows, 20);
}

TEST(Loader, NonsenseOptionsAreClearErrors) {
  Data data(10);
  EXPECT_THROW(Loader(data.Open(), Opts(0)), Error);
  EXPECT_THROW(Loader(data.Open(), Opts(-1)), Error);
  LoaderOptions o = Opts(2);
  o.rank = 3;
  o.world_size = 2;
  EXPECT_THROW(Loader(data.Open(), o), Error);
  o = Opts(2);
  o.workers = -1;
  EXPECT_THROW(Loader(data.Open(), o), Error);
  EXPECT_THROW(Loader(nullptr, Opts(2)), Error);
}

// Without drop_last every rank runs the same number of steps of the same sizes (DDP pairs
// each rank's all-reduce with the others'); pad = false gives each sample exactly once.

}  // namespace
}  // namespace gpufeed
