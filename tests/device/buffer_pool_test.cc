#include "device/buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

struct CountingAllocator {
  std::shared_ptr<std::atomic<int>> live = std::make_shared<std::atomic<int>>(0);
  BufferPool::AllocFn Alloc() {
    auto l = live;
    return [l](size_t n) {
      ++*l;
      return std::malloc(n);
    };
  }
  BufferPool::FreeFn Free() {
    auto l = live;
    return [l](void* p) {
      --*l;
      std::free(p);
    };
  }
};

class ManualFence : public Fence {
 public:
  bool IsDone() override { return done.load(); }
  void Wait() override {
    while (!done.load()) std::this_thread::yield();
  }
  std::atomic<bool> done{false};
};

const auto kNever = [] { return false; };

TEST(BufferPool, AllocatesLazilyUpToCapacityAndReusesLifo) {
  CountingAllocator a;
  auto pool = BufferPool::Create("t", 64, 3, a.Alloc(), a.Free());
  EXPECT_EQ(pool->allocated(), 0);
  std::byte* first;
  {
    auto h = pool->Acquire(kNever);
    first = h.data();
    EXPECT_EQ(pool->in_use(), 1);
  }
  EXPECT_EQ(pool->in_use(), 0);
  auto again = pool->Acquire(kNever);
  EXPECT_EQ(again.data(), first);  // the warm buffer comes back
  EXPECT_EQ(pool->allocated(), 1);
}

TEST(BufferPool, ReserveAllocatesUpFrontWithinCapacityAndAcquireUsesThoseFirst) {
  CountingAllocator counter;
  {
    auto pool = BufferPool::Create("test", 64, 4, counter.Alloc(), counter.Free());
    pool->Reserve(3);
    EXPECT_EQ(pool->allocated(), 3);
    EXPECT_EQ(pool->in_use(), 0);
    EXPECT_EQ(counter.live->load(), 3);
    pool->Reserve(9);  // never beyond capacity
    EXPECT_EQ(pool->allocated(), 4);
    std::vector<BufferPool::Handle> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool->Acquire(kNever));
    EXPECT_EQ(pool->allocated(), 4);  // no allocation on Acquire: all were reserved
    EXPECT_EQ(pool->in_use(), 4);
  }
  EXPECT_EQ(counter.live->load(), 0);
}

TEST(BufferPool, ReserveThatRunsOutOfMemoryKeepsWhatItMadeAndFreesItLater) {
  CountingAllocator counter;
  int calls = 0;
  auto alloc = counter.Alloc();
  {
    auto pool = BufferPool::Create(
        "test", 64, 4,
        [&](size_t n) -> void* {
          if (++calls == 3) throw std::runtime_error("out of memory");
          return alloc(n);
        },
        counter.Free());
    EXPECT_THROW(pool->Reserve(4), std::runtime_error);
    EXPECT_EQ(pool->allocated(), 2);
  }
  EXPECT_EQ(counter.live->load(), 0);
}

TEST(BufferPool, HandlesKeepThePoolAliveAndFreeEverythingAtTheEnd) {
  CountingAllocator a;
  BufferPool::Handle kept;
  {
    auto pool = BufferPool::Create("t", 64, 2, a.Alloc(), a.Free());
    kept = pool->Acquire(kNever);
    auto second = pool->Acquire(kNever);
  }
  EXPECT_EQ(a.live->load(), 2);  // the pool lives on through `kept`
  std::memset(kept.data(), 1, kept.size());
  kept.Reset();
  EXPECT_EQ(a.live->load(), 0);
}

TEST(BufferPool, FencedBufferIsNotReusedBeforeItsFence) {
  CountingAllocator a;
  auto pool = BufferPool::Create("t", 64, 1, a.Alloc(), a.Free());
  auto fence = std::make_shared<ManualFence>();
  auto h = pool->Acquire(kNever);
  h.ReleaseAfter(fence);
  EXPECT_EQ(pool->in_use(), 1);
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto again = pool->Acquire(kNever);
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());  // still read by the "copy"
  fence->done = true;
  t.join();
  EXPECT_TRUE(got.load());
}

TEST(BufferPool, StopWakesAWaiterWithAnEmptyHandle) {
  CountingAllocator a;
  auto pool = BufferPool::Create("t", 64, 1, a.Alloc(), a.Free());
  auto h = pool->Acquire(kNever);
  std::atomic<bool> stop{false};
  std::atomic<bool> empty{false};
  std::thread t([&] { empty = !pool->Acquire([&] { return stop.load(); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  pool->WakeAll();
  t.join();
  EXPECT_TRUE(empty.load());
}

// A waiter blocked on a full pool gets a new buffer once the pool grows.
TEST(BufferPool, GrowWakesAWaiterWithANewBuffer) {
  CountingAllocator a;
  auto pool = BufferPool::Create("t", 64, 1, a.Alloc(), a.Free());
  auto h = pool->Acquire(kNever);
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto second = pool->Acquire(kNever);
    got = second && second.data() != h.data();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load());
  pool->Grow(1);
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(pool->capacity(), 2);
  EXPECT_EQ(pool->allocated(), 2);
}

}  // namespace
}  // namespace gpufeed
