#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>

namespace gpufeed {
namespace {

TEST(ThreadPool, RunsEveryTaskWithAThreadIndex) {
  ThreadPool pool(3);
  std::atomic<int> count{0};
  std::mutex mu;
  std::set<int> indices;
  std::vector<std::future<void>> futures;
  for (int i = 0; i < 100; ++i) {
    futures.push_back(pool.Submit([&](int thread_index) {
      ++count;
      std::lock_guard lock(mu);
      indices.insert(thread_index);
    }));
  }
  for (auto& f : futures) f.get();
  EXPECT_EQ(count.load(), 100);
  for (int i : indices) EXPECT_TRUE(i >= 0 && i < 3);
}

TEST(ThreadPool, ParallelForCoversTheRangeAndRethrows) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(1000, [&](int64_t i, int) { hits[static_cast<size_t>(i)]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.ParallelFor(10,
                                [](int64_t i, int) {
                                  if (i == 5) throw std::runtime_error("five");
                                }),
               std::runtime_error);
}

TEST(ThreadPool, DestructorFinishesQueuedWork) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 10; ++i) pool.Submit([&](int) { ++done; });
  }
  EXPECT_EQ(done.load(), 10);
}

}  // namespace
}  // namespace gpufeed
