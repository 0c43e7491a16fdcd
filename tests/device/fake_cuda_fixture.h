// FakeCudaTest: a fixture that points gpufeed at the fake libcuda.so.1 and, after each
// test, checks the fake's bookkeeping: no call a real driver would reject, and nothing
// left behind (allocations, streams, events, primary-context references).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "device/pinned_host_pool.h"
#include "fake_cuda/fake_cuda_control.h"

namespace gpufeed::testing {

inline std::string FakeFailures() {
  std::string all;
  for (int i = 0; i < fake_cuda_failures(); ++i) {
    all += fake_cuda_failure(i);
    all += "\n";
  }
  return all;
}

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPUFEED_CUDA_LIBRARY", GPUFEED_FAKE_CUDA, 1);
    unsetenv("LOCAL_RANK");
    fake_cuda_reset();
    // Every buffer unpinned as its user lets go, so a test counts the fake's allocations as
    // its code left them; the pool's own tests give it a budget.
    cuda::PinnedHostPool::Instance().SetRetainBytes(0);
  }

  void TearDown() override {
    cuda::PinnedHostPool::Instance().SetRetainBytes(0);  // what a test kept, unpinned
    EXPECT_EQ(fake_cuda_failures(), expected_failures_) << FakeFailures();
    EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
    EXPECT_EQ(fake_cuda_live_streams(), 0);
    EXPECT_EQ(fake_cuda_live_events(), 0);
    EXPECT_EQ(fake_cuda_primary_ctx_refs(0), 0);
    EXPECT_EQ(fake_cuda_live_modules(), 0);
    fake_cuda_reset();
  }

  // Failures a test provokes on purpose.
  int expected_failures_ = 0;
};

}  // namespace gpufeed::testing
