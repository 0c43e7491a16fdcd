// The fake driver itself: it must behave like the real one where gpufeed's correctness
// depends on it (events, stream order, waits, sticky errors) and catch what a real driver
// would reject, or the device tests prove nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "device/cuda_driver.h"
#include "fake_cuda_fixture.h"

namespace gpufeed::cuda {
namespace {

class FakeDriverTest : public testing::FakeCudaTest {
 protected:
  void SetUp() override {
    FakeCudaTest::SetUp();
    driver_ = &CudaDriver::Get();
    ASSERT_TRUE(driver_->is_fake());
    ASSERT_EQ(driver_->Init(0), kSuccess);
    ASSERT_EQ(driver_->DevicePrimaryCtxRetain(&context_, 0), kSuccess);
    ASSERT_EQ(driver_->CtxSetCurrent(context_), kSuccess);
  }
  void TearDown() override {
    driver_->CtxSetCurrent(nullptr);
    driver_->DevicePrimaryCtxRelease(0);
    FakeCudaTest::TearDown();
  }

  const CudaDriver* driver_ = nullptr;
  CUcontext context_ = nullptr;
};

TEST_F(FakeDriverTest, EventIsNotReadyUntilItsStreamReachesIt) {
  fake_cuda_set_copy_delay_us(30'000);
  void* host = nullptr;
  CUdeviceptr device = 0;
  ASSERT_EQ(driver_->MemHostAlloc(&host, 4096, 0), kSuccess);
  ASSERT_EQ(driver_->MemAlloc(&device, 4096), kSuccess);
  std::memset(host, 7, 4096);
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_EQ(driver_->StreamCreate(&stream, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&event, kEventDisableTiming), kSuccess);
  ASSERT_EQ(driver_->MemcpyHtoDAsync(device, host, 4096, stream), kSuccess);
  ASSERT_EQ(driver_->EventRecord(event, stream), kSuccess);

  EXPECT_EQ(driver_->EventQuery(event), kErrorNotReady);
  EXPECT_EQ(fake_cuda_pending_writes(reinterpret_cast<void*>(device), 4096), 1);
  ASSERT_EQ(driver_->EventSynchronize(event), kSuccess);
  EXPECT_EQ(driver_->EventQuery(event), kSuccess);
  EXPECT_EQ(fake_cuda_pending_writes(reinterpret_cast<void*>(device), 4096), 0);
  EXPECT_EQ(static_cast<unsigned char*>(reinterpret_cast<void*>(device))[4095], 7);

  EXPECT_EQ(driver_->EventDestroy(event), kSuccess);
  EXPECT_EQ(driver_->StreamDestroy(stream), kSuccess);
  EXPECT_EQ(driver_->MemFree(device), kSuccess);
  EXPECT_EQ(driver_->MemFreeHost(host), kSuccess);
}

TEST_F(FakeDriverTest, TimingEventsMeasureABusyStreamAsTheRealDriverDoes) {
  ASSERT_NE(driver_->EventElapsedTime, nullptr);
  CUstream stream = nullptr;
  CUevent start = nullptr, end = nullptr, untimed = nullptr, never = nullptr;
  ASSERT_EQ(driver_->StreamCreate(&stream, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&start, kEventDefault), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&end, kEventDefault), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&untimed, kEventDisableTiming), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&never, kEventDefault), kSuccess);
  EXPECT_EQ(driver_->StreamQuery(stream), kSuccess);  // nothing enqueued: drained

  ASSERT_EQ(driver_->EventRecord(start, stream), kSuccess);
  ASSERT_EQ(fake_cuda_stream_sleep(stream, 30'000), 0);  // a 30 ms kernel
  ASSERT_EQ(driver_->EventRecord(end, stream), kSuccess);
  ASSERT_EQ(driver_->EventRecord(untimed, stream), kSuccess);
  float ms = -1;
  EXPECT_EQ(driver_->StreamQuery(stream), kErrorNotReady);
  EXPECT_EQ(driver_->EventElapsedTime(&ms, start, end), kErrorNotReady);
  ASSERT_EQ(driver_->StreamSynchronize(stream), kSuccess);
  EXPECT_EQ(driver_->StreamQuery(stream), kSuccess);
  ASSERT_EQ(driver_->EventElapsedTime(&ms, start, end), kSuccess);
  EXPECT_GE(ms, 29.0f);
  EXPECT_LT(ms, 300.0f);  // generous: a loaded machine sleeps long
  float back = 0;
  ASSERT_EQ(driver_->EventElapsedTime(&back, end, start), kSuccess);
  EXPECT_FLOAT_EQ(back, -ms);
  EXPECT_EQ(driver_->EventElapsedTime(&ms, start, untimed), kErrorInvalidHandle);
  EXPECT_EQ(driver_->EventElapsedTime(&ms, start, never), kErrorInvalidHandle);

  // A host function runs in stream order: after the 30 ms before it.
  ASSERT_EQ(driver_->EventRecord(start, stream), kSuccess);
  ASSERT_EQ(fake_cuda_stream_sleep(stream, 30'000), 0);
  int ran = 0;
  ASSERT_EQ(driver_->LaunchHostFunc(stream, [](void* p) { ++*static_cast<int*>(p); }, &ran),
            kSuccess);
  ASSERT_EQ(driver_->EventRecord(end, stream), kSuccess);
  ASSERT_EQ(driver_->EventSynchronize(start), kSuccess);
  ASSERT_EQ(driver_->StreamSynchronize(stream), kSuccess);
  EXPECT_EQ(ran, 1);
  ASSERT_EQ(driver_->EventElapsedTime(&ms, start, end), kSuccess);
  EXPECT_GE(ms, 29.0f);

  for (CUevent e : {start, end, untimed, never}) EXPECT_EQ(driver_->EventDestroy(e), kSuccess);
  EXPECT_EQ(driver_->StreamDestroy(stream), kSuccess);
}

TEST_F(FakeDriverTest, StreamWaitEventOrdersOnlyTheWaitingStream) {
  fake_cuda_set_copy_delay_us(30'000);
  void* host = nullptr;
  CUdeviceptr device = 0;
  ASSERT_EQ(driver_->MemHostAlloc(&host, 256, 0), kSuccess);
  ASSERT_EQ(driver_->MemAlloc(&device, 256), kSuccess);
  CUstream copier = nullptr, waiter = nullptr, other = nullptr;
  CUevent event = nullptr;
  ASSERT_EQ(driver_->StreamCreate(&copier, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->StreamCreate(&waiter, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->StreamCreate(&other, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&event, kEventDisableTiming), kSuccess);
  ASSERT_EQ(driver_->MemcpyHtoDAsync(device, host, 256, copier), kSuccess);
  ASSERT_EQ(driver_->EventRecord(event, copier), kSuccess);
  ASSERT_EQ(driver_->StreamWaitEvent(waiter, event, kEventWaitDefault), kSuccess);

  const void* dst = reinterpret_cast<void*>(device);
  int ordered = 99, unordered = 99;
  ASSERT_EQ(fake_cuda_stream_probe(waiter, dst, 256, &ordered), 0);
  ASSERT_EQ(fake_cuda_stream_probe(other, dst, 256, &unordered), 0);
  ASSERT_EQ(driver_->StreamSynchronize(other), kSuccess);
  ASSERT_EQ(driver_->StreamSynchronize(waiter), kSuccess);
  EXPECT_EQ(ordered, 0);    // ran after the copy
  EXPECT_EQ(unordered, 1);  // ran while the copy was still queued

  driver_->EventDestroy(event);
  for (CUstream s : {copier, waiter, other}) driver_->StreamDestroy(s);
  driver_->MemFree(device);
  driver_->MemFreeHost(host);
}

TEST_F(FakeDriverTest, AsynchronousCopyFailureIsStickyOnItsStream) {
  fake_cuda_fail_copy(1, 700, 1);
  void* host = nullptr;
  CUdeviceptr device = 0;
  ASSERT_EQ(driver_->MemHostAlloc(&host, 64, 0), kSuccess);
  ASSERT_EQ(driver_->MemAlloc(&device, 64), kSuccess);
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_EQ(driver_->StreamCreate(&stream, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->EventCreate(&event, kEventDisableTiming), kSuccess);
  ASSERT_EQ(driver_->MemcpyHtoDAsync(device, host, 64, stream), kSuccess);
  ASSERT_EQ(driver_->EventRecord(event, stream), kSuccess);
  EXPECT_EQ(driver_->EventSynchronize(event), 700);
  EXPECT_EQ(driver_->StreamSynchronize(stream), 700);
  EXPECT_EQ(driver_->ErrorName(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
  driver_->EventDestroy(event);
  driver_->StreamDestroy(stream);
  driver_->MemFree(device);
  driver_->MemFreeHost(host);
}

TEST_F(FakeDriverTest, RejectsWhatARealDriverWouldReject) {
  expected_failures_ = 4;
  int local = 0;
  // Unknown pointers and double frees.
  EXPECT_EQ(driver_->MemFree(reinterpret_cast<CUdeviceptr>(&local)), kErrorInvalidValue);
  CUdeviceptr device = 0;
  ASSERT_EQ(driver_->MemAlloc(&device, 64), kSuccess);
  ASSERT_EQ(driver_->MemFree(device), kSuccess);
  EXPECT_EQ(driver_->MemFree(device), kErrorInvalidValue);
  // A copy into memory that is not a device allocation.
  CUstream stream = nullptr;
  ASSERT_EQ(driver_->StreamCreate(&stream, kStreamNonBlocking), kSuccess);
  EXPECT_EQ(driver_->MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(&local), &local, 4, stream),
            kErrorInvalidValue);
  driver_->StreamDestroy(stream);
  // A thread without a current context.
  CUresult on_thread = kSuccess;
  std::thread([&] {
    CUdeviceptr p = 0;
    on_thread = driver_->MemAlloc(&p, 64);
  }).join();
  EXPECT_EQ(on_thread, kErrorInvalidContext);
  EXPECT_EQ(fake_cuda_failures(), 4) << testing::FakeFailures();
}

TEST_F(FakeDriverTest, FreeingMemoryAnUnfinishedCopyUsesIsRecorded) {
  expected_failures_ = 1;
  fake_cuda_set_copy_delay_us(20'000);
  void* host = nullptr;
  CUdeviceptr device = 0;
  ASSERT_EQ(driver_->MemHostAlloc(&host, 64, 0), kSuccess);
  ASSERT_EQ(driver_->MemAlloc(&device, 64), kSuccess);
  CUstream stream = nullptr;
  ASSERT_EQ(driver_->StreamCreate(&stream, kStreamNonBlocking), kSuccess);
  ASSERT_EQ(driver_->MemcpyHtoDAsync(device, host, 64, stream), kSuccess);
  EXPECT_EQ(driver_->MemFreeHost(host), kSuccess);  // too early: the copy still reads it
  EXPECT_EQ(fake_cuda_failures(), 1);
  driver_->StreamDestroy(stream);
  driver_->MemFree(device);
}

}  // namespace
}  // namespace gpufeed::cuda
