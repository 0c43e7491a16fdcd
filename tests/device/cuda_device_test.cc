// CudaDevice on the fake driver: opening by spec with clear errors, the primary context,
// pinned and device memory with tracking, out-of-memory messages, any-thread use.
#include "device/cuda_device.h"
#include "device/pinned_host_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "fake_cuda_fixture.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Error OpenError(const std::string& spec) {
  try {
    OpenDevice(spec);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "OpenDevice(" << spec << ") should fail";
  return Error(ErrorCode::kInvalidArgument, "");
}

class CudaDeviceTest : public testing::FakeCudaTest {};

TEST_F(CudaDeviceTest, CudaSpecOpensThePrimaryContextOfDeviceZero) {
  {
    auto device = OpenDevice("cuda");
    EXPECT_EQ(device->type(), DeviceType::kCuda);
    EXPECT_EQ(device->name(), "cuda:0");
    EXPECT_EQ(device->ordinal(), 0);
    EXPECT_TRUE(device->needs_copy());
    EXPECT_EQ(fake_cuda_primary_ctx_refs(0), 1);
    auto* cuda = dynamic_cast<CudaDevice*>(device.get());
    ASSERT_NE(cuda, nullptr);
    EXPECT_THAT(cuda->product_name(), HasSubstr("Fake GPU 0"));
  }
  EXPECT_EQ(fake_cuda_primary_ctx_refs(0), 0);  // released exactly once
}

TEST_F(CudaDeviceTest, OrdinalComesFromTheSpecElseLocalRank) {
  fake_cuda_set_device_count(3);
  EXPECT_EQ(OpenDevice("cuda:2")->name(), "cuda:2");
  setenv("LOCAL_RANK", "1", 1);
  EXPECT_EQ(OpenDevice("cuda")->name(), "cuda:1");
  setenv("LOCAL_RANK", "one", 1);
  const Error e = OpenError("cuda");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("LOCAL_RANK='one'"));
}

TEST_F(CudaDeviceTest, BadOrdinalSaysWhichDevicesExist) {
  fake_cuda_set_device_count(2);
  const Error e = OpenError("cuda:5");
  EXPECT_EQ(e.code(), ErrorCode::kDevice);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("no cuda:5"), HasSubstr("sees 2 GPUs"),
                              HasSubstr("cuda:0 to cuda:1"), HasSubstr(GPUFEED_FAKE_CUDA)));
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_THAT(OpenError("cuda").what(), AllOf(HasSubstr("no cuda:3 (from LOCAL_RANK)")));
}

TEST_F(CudaDeviceTest, NoDeviceIsAClearError) {
  fake_cuda_set_device_count(0);
  Error e = OpenError("cuda");
  EXPECT_EQ(e.code(), ErrorCode::kDevice);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("sees no GPU"), HasSubstr(GPUFEED_FAKE_CUDA)));
  fake_cuda_set_device_count(1);
  fake_cuda_set_init_result(100);  // what cuInit says with CUDA_VISIBLE_DEVICES=""
  EXPECT_THAT(OpenError("cuda:0").what(), HasSubstr("sees no GPU"));
  fake_cuda_set_init_result(34);
  EXPECT_THAT(OpenError("cuda").what(), HasSubstr("stub library"));
  fake_cuda_set_init_result(999);
  EXPECT_THAT(OpenError("cuda").what(),
              AllOf(HasSubstr("failed to initialize"), HasSubstr("CUDA_ERROR_UNKNOWN")));
}

TEST_F(CudaDeviceTest, NoLibraryNamesTheLibraryTried) {
  setenv("GPUFEED_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  const Error e = OpenError("cuda");
  EXPECT_EQ(e.code(), ErrorCode::kDevice);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("cannot load the CUDA driver"),
                              HasSubstr("/nonexistent/libcuda.so.1"), HasSubstr("No such file")));
}

TEST_F(CudaDeviceTest, TheToolkitStubLibraryIsNamedAsSuch) {
  // The toolkit's link-time stub exports every symbol but answers 34 to everything.
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub.c_str(), R_OK) != 0) GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  try {
    OpenCudaDevice({.ordinal = 0, .library = stub});
    FAIL() << "the stub is not a driver";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), AllOf(HasSubstr(stub), HasSubstr("stub library, not a driver")));
  }
}

TEST_F(CudaDeviceTest, AutoFallsBackToTheHostWithOneLineNotice) {
  setenv("GPUFEED_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  ::testing::internal::CaptureStderr();
  auto device = OpenDevice("auto");
  const std::string notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(device->type(), DeviceType::kCpu);
  EXPECT_THAT(notice, AllOf(HasSubstr("auto -> cpu"), HasSubstr("/nonexistent/libcuda.so.1")));
  EXPECT_EQ(std::count(notice.begin(), notice.end(), '\n'), 1) << notice;

  fake_cuda_set_device_count(0);
  setenv("GPUFEED_CUDA_LIBRARY", GPUFEED_FAKE_CUDA, 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(OpenDevice("auto")->type(), DeviceType::kCpu);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("sees no GPU"));
}

TEST_F(CudaDeviceTest, AutoPicksCudaWhenADriverAndAGpuAreThere) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(OpenDevice("auto")->name(), "cuda:0");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  setenv("LOCAL_RANK", "x", 1);  // a user error is raised, not papered over with the host
  EXPECT_EQ(OpenError("auto").code(), ErrorCode::kInvalidArgument);
}

TEST_F(CudaDeviceTest, MalformedSpecsAreInvalidArguments) {
  for (const char* spec : {"cuda:", "cuda:x", "cuda:-1", "cuda:1x", "gpu", "CUDA"}) {
    const Error e = OpenError(spec);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << spec;
    EXPECT_THAT(e.what(), HasSubstr(spec));
  }
}

TEST_F(CudaDeviceTest, AllocationsArePinnedOrDeviceMemoryAndAllComeBack) {
  auto device = OpenCudaDevice();
  void* host = device->AllocHost(1000);
  void* mem = device->AllocDevice(3000);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 2);
  EXPECT_EQ(fake_cuda_device_bytes_in_use(), 3000u);
  const DeviceMemoryInfo info = device->MemoryInfo();
  EXPECT_EQ(info.total_bytes, uint64_t{1} << 30);
  EXPECT_EQ(info.free_bytes, (uint64_t{1} << 30) - 3000);
  EXPECT_EQ(device->stats().host_bytes_allocated, 1000);
  EXPECT_EQ(device->stats().device_bytes_allocated, 3000);
  device->FreeDevice(mem);
  device->FreeHost(host);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

TEST_F(CudaDeviceTest, KeptPinnedBuffersHoldTheirContextAndServeOnlyTheirSize) {
  PinnedHostPool& pool = PinnedHostPool::Instance();
  pool.SetRetainBytes(1 << 20);
  void* first = nullptr;
  {
    auto device = OpenCudaDevice();
    first = device->AllocHost(4096);
    device->FreeHost(first);
  }
  // The device is gone; its context stays retained while the pool keeps what it pinned.
  EXPECT_EQ(fake_cuda_primary_ctx_refs(0), 1);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 1);
  auto device = OpenCudaDevice();
  void* other = device->AllocHost(8192);  // another size: pinned afresh
  EXPECT_NE(other, first);
  void* again = device->AllocHost(4096);
  EXPECT_EQ(again, first);
  device->FreeHost(again);
  device->FreeHost(other);
  device.reset();
  pool.SetRetainBytes(8192);  // the oldest goes first, until the rest fits
  EXPECT_EQ(pool.counters().kept_bytes, 8192);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 1);
  pool.Trim();
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  EXPECT_EQ(fake_cuda_primary_ctx_refs(0), 0);
  EXPECT_FALSE(pool.Give(first));  // not out: refused, nothing done
}

TEST_F(CudaDeviceTest, OutOfDeviceMemoryNamesTheBytesAskedAndTheMemoryFree) {
  fake_cuda_set_device_memory(1 << 20);
  auto device = OpenCudaDevice();
  void* held = device->AllocDevice(600'000);
  try {
    device->AllocDevice(2'000'000);
    FAIL() << "the allocation should not fit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("cuda:0"), HasSubstr("2000000 byte"),
                                HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"),
                                HasSubstr("448576 bytes"),  // 1 MiB - 600,000 free
                                HasSubstr("of 1048576")));
  }
  device->FreeDevice(held);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

TEST_F(CudaDeviceTest, PinnedMemoryThatCannotBeHadNamesTheBytes) {
  fake_cuda_set_pinned_limit(4096);
  auto device = OpenCudaDevice();
  try {
    device->AllocHost(8192);
    FAIL() << "the pinned allocation should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("8192 byte"), HasSubstr("pin")));
  }
}

TEST_F(CudaDeviceTest, AForkedChildIsToldCudaDoesNotSurviveFork) {
  auto device = OpenCudaDevice();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // No gtest assertions in the child: the exit code says what went wrong.
    int code = 0;
    try {
      OpenDevice("cuda");
      code = 1;
    } catch (const Error& e) {
      if (std::string(e.what()).find("forked") == std::string::npos) code = 2;
    }
    try {
      device->AllocDevice(64);
      code = 3;
    } catch (const Error& e) {
      if (std::string(e.what()).find("spawn") == std::string::npos) code = 4;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1/3: CUDA used in the child; 2/4: unclear message";
  void* mem = device->AllocDevice(64);  // the parent is unaffected
  device->FreeDevice(mem);
}

TEST_F(CudaDeviceTest, AnyThreadMayCallAndItsCurrentContextIsPutBack) {
  auto device = OpenCudaDevice();
  const CudaDriver& driver = device->driver();
  std::thread([&] {
    // A fresh thread has no current context: the fake records a failure if the device
    // forgot to make its context current.
    void* mem = device->AllocDevice(64);
    auto stream = device->NewStream();
    auto event = stream->Record();
    event->Wait();
    device->FreeDevice(mem);
    CUcontext current = reinterpret_cast<CUcontext>(1);
    driver.CtxGetCurrent(&current);
    EXPECT_EQ(current, nullptr);  // as the thread had it
  }).join();
}

}  // namespace
}  // namespace gpufeed::cuda
