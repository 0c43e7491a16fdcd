// FakeCudaTest: a fixture that points gpufeed at the fake libcuda.so.1 and, after each
// test, checks the fake's bookkeeping: no call a real driver would reject, and nothing
// left behind (allocations, streams, events, primary-context references).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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
  }

  void TearDown() override {
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
