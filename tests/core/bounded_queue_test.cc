#include "core/bounded_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

TEST(BoundedQueue, FifoAndCapacityBlocksProducers) {
  BoundedQueue<int> q(2);
  ASSERT_TRUE(q.Push(1));
  ASSERT_TRUE(q.Push(2));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    q.Push(3);
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed.load());  // full: the third push waits
  EXPECT_EQ(q.Pop(), 1);
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), 3);
  EXPECT_FALSE(q.TryPop().has_value());
}

TEST(BoundedQueue, CloseWakesEveryWaiterAndDrains) {
  BoundedQueue<int> q(1);
  std::vector<std::thread> consumers;
  std::atomic<int> woke{0};
  for (int i = 0; i < 3; ++i) {
    consumers.emplace_back([&] {
      if (!q.Pop().has_value()) ++woke;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.Close();
  for (auto& t : consumers) t.join();
  EXPECT_EQ(woke.load(), 3);
  EXPECT_FALSE(q.Push(7));
}

TEST(BoundedQueue, ManyProducersManyConsumersLoseNothing) {
  BoundedQueue<int> q(8);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < 4; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < 1000; ++i) q.Push(p * 1000 + i);
    });
  }
  std::vector<std::thread> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.emplace_back([&] {
      while (auto v = q.Pop()) sum += *v;
    });
  }
  for (auto& t : threads) t.join();
  q.Close();
  for (auto& t : consumers) t.join();
  EXPECT_EQ(sum.load(), 4000LL * 3999 / 2);
}

}  // namespace
}  // namespace gpufeed
