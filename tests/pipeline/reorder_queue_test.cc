#include "pipeline/reorder_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

using namespace std::chrono_literals;

// Long enough that a thread which could go on has gone on, on a loaded machine; only used to
// show that a thread is still blocked, never to wait for one that should finish.
constexpr auto kStillBlocked = 100ms;

TEST(ReorderQueue, DeliversInSequenceOrderWhateverOrderWorkersFinishIn) {
  ReorderQueue<int64_t> queue(4, 4);
  constexpr int64_t kItems = 200;
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&queue, w] {
      std::mt19937 rng(static_cast<unsigned>(w));
      while (auto seq = queue.Claim(w)) {
        if (*seq >= kItems) return;
        if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
        queue.Put(*seq, *seq * 10);
      }
    });
  }
  for (int64_t i = 0; i < kItems; ++i) EXPECT_EQ(queue.Pop(), i * 10);
  queue.Close();
  for (auto& t : workers) t.join();
}

TEST(ReorderQueue, ClaimsStayWithinWorkersPlusPrefetchOfDelivery) {
  ReorderQueue<int> queue(1, 2);  // window: 3 numbers ahead of the next delivery
  EXPECT_EQ(queue.Claim(0), 0);
  EXPECT_EQ(queue.Claim(0), 1);
  EXPECT_EQ(queue.Claim(0), 2);
  auto fourth = std::async(std::launch::async, [&] { return queue.Claim(0); });
  EXPECT_EQ(fourth.wait_for(kStillBlocked), std::future_status::timeout);
  queue.Put(1, 11);  // out of order: the window does not move until 0 is delivered
  EXPECT_EQ(fourth.wait_for(kStillBlocked), std::future_status::timeout);
  queue.Put(0, 10);
  EXPECT_EQ(queue.Pop(), 10);
  EXPECT_EQ(fourth.get(), 3);
  EXPECT_EQ(queue.Pop(), 11);
}

TEST(ReorderQueue, WorkersPastTheActiveCountParkUntilTheWindowLetsThemIn) {
  ReorderQueue<int> queue(1, 4);
  auto parked = std::async(std::launch::async, [&] { return queue.Claim(2); });
  EXPECT_EQ(parked.wait_for(kStillBlocked), std::future_status::timeout);
  EXPECT_EQ(queue.Claim(0), 0);  // worker 0 is active
  queue.SetWindow(3, 4);
  EXPECT_EQ(parked.get(), 1);
  EXPECT_EQ(queue.workers(), 3);
  EXPECT_EQ(queue.prefetch(), 4);
}

TEST(ReorderQueue, FailWakesTheConsumerAndTheWorkersAndKeepsTheFirstError) {
  ReorderQueue<int> queue(1, 1);
  EXPECT_EQ(queue.Claim(0), 0);
  EXPECT_EQ(queue.Claim(0), 1);
  auto worker = std::async(std::launch::async, [&] { return queue.Claim(0); });
  auto consumer = std::async(std::launch::async, [&] { return queue.Pop(); });
  EXPECT_EQ(consumer.wait_for(kStillBlocked), std::future_status::timeout);
  EXPECT_FALSE(queue.halted());
  queue.Fail(std::make_exception_ptr(std::runtime_error("first")));
  queue.Fail(std::make_exception_ptr(std::runtime_error("second")));
  EXPECT_EQ(worker.get(), std::nullopt);
  try {
    consumer.get();
    FAIL() << "Pop returned after Fail";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_TRUE(queue.halted());
  EXPECT_TRUE(queue.failed());
  queue.Put(0, 1);  // a worker finishing late: kept, but the error still comes first
  EXPECT_THROW(queue.Pop(), std::runtime_error);
  EXPECT_THROW(queue.RethrowIfFailed(), std::runtime_error);
}

// Counts the live items, to show which ones the queue destroys.
struct Counted {
  explicit Counted(std::shared_ptr<std::atomic<int>> live) : live_(std::move(live)) { ++*live_; }
  Counted(Counted&& other) noexcept : live_(std::move(other.live_)) {}
  Counted& operator=(Counted&&) = delete;
  ~Counted() {
    if (live_) --*live_;
  }
  std::shared_ptr<std::atomic<int>> live_;
};

TEST(ReorderQueue, CloseStopsClaimsDropsPutsAndResetOpensANewRun) {
  auto live = std::make_shared<std::atomic<int>>(0);
  ReorderQueue<Counted> queue(2, 2);
  EXPECT_EQ(queue.Claim(0), 0);
  EXPECT_EQ(queue.Claim(1), 1);
  queue.Put(1, Counted(live));
  EXPECT_EQ(*live, 1);
  auto parked = std::async(std::launch::async, [&] { return queue.Claim(3); });
  queue.Close();
  EXPECT_EQ(parked.get(), std::nullopt);
  EXPECT_EQ(queue.Claim(0), std::nullopt);
  EXPECT_TRUE(queue.halted());
  EXPECT_FALSE(queue.failed());  // closing is no error
  queue.Put(0, Counted(live));   // dropped
  EXPECT_EQ(*live, 1);
  queue.Clear();
  EXPECT_EQ(*live, 0);

  queue.Reset();
  EXPECT_FALSE(queue.halted());
  EXPECT_EQ(queue.Claim(0), 0);
  queue.Put(0, Counted(live));
  EXPECT_EQ(*live, 1);
  {
    Counted popped = queue.Pop();
    EXPECT_EQ(*live, 1);
  }
  EXPECT_EQ(*live, 0);
}

}  // namespace
}  // namespace gpufeed
