#include "gpufeed/cancel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "core/thread_pool.h"
#include "error_code_of.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;

TEST(Cancel, OnlyTheCurrentScopesCancelledTokenThrows) {
  CancelToken token;
  EXPECT_FALSE(CancelRequested());
  ThrowIfCancelled("outside every scope");
  token.Cancel();
  EXPECT_FALSE(CancelRequested());  // cancelled, but not this thread's token yet
  {
    CancelScope scope(&token);
    EXPECT_EQ(CurrentCancelToken(), &token);
    EXPECT_TRUE(CancelRequested());
    std::string message;
    EXPECT_EQ(ErrorCodeOf([] { ThrowIfCancelled("building x"); }, &message), ErrorCode::kCancelled);
    EXPECT_EQ(message, "building x: interrupted");
    {
      CancelScope shielded(nullptr);  // nested: not cancellable within
      EXPECT_FALSE(CancelRequested());
      ThrowIfCancelled("shielded");
    }
    EXPECT_TRUE(CancelRequested());  // the outer scope's token again
  }
  EXPECT_EQ(CurrentCancelToken(), nullptr);
  ThrowIfCancelled("after the scope");
}

TEST(Cancel, ATokenIsPerThread) {
  CancelToken token;
  token.Cancel();
  CancelScope scope(&token);
  bool other_thread_sees = true;
  std::thread([&] { other_thread_sees = CancelRequested(); }).join();
  EXPECT_FALSE(other_thread_sees);
}

TEST(Cancel, ParallelForRunsItsCallsUnderTheCallersToken) {
  ThreadPool pool(2);
  CancelToken token;
  std::atomic<int> under_token{0};
  {
    CancelScope scope(&token);
    pool.ParallelFor(64, [&](int64_t, int) {
      if (CurrentCancelToken() == &token) under_token.fetch_add(1);
    });
  }
  EXPECT_EQ(under_token.load(), 64);
  // The pool's threads keep no token once the call is over.
  const CancelToken* after = &token;
  pool.Submit([&](int) { after = CurrentCancelToken(); }).get();
  EXPECT_EQ(after, nullptr);
  // Without a scope, the calls run under none.
  std::atomic<int> with_token{0};
  pool.ParallelFor(8, [&](int64_t, int) {
    if (CurrentCancelToken() != nullptr) with_token.fetch_add(1);
  });
  EXPECT_EQ(with_token.load(), 0);
}

TEST(Cancel, ACancelFromAnotherThreadStopsAParallelFor) {
  ThreadPool pool(2);
  CancelToken token;
  std::atomic<int64_t> started{0};
  std::thread canceller([&] {
    while (started.load() == 0) std::this_thread::yield();
    token.Cancel();
  });
  CancelScope scope(&token);
  constexpr int64_t kCalls = 1'000'000;
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  pool.ParallelFor(kCalls, [&](int64_t, int) {
                    ThrowIfCancelled("the job");
                    started.fetch_add(1);
                    // Each call lasts until the cancel is seen, so the job cannot end first.
                    while (!CancelRequested()) std::this_thread::yield();
                  });
                },
                &message),
            ErrorCode::kCancelled);
  canceller.join();
  EXPECT_EQ(message, "the job: interrupted");
  EXPECT_LE(started.load(), 2);  // one call per thread began before the cancel, no more after
}

}  // namespace
}  // namespace gpufeed
