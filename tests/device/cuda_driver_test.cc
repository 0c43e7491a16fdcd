// The driver table: loaded from the library GPUFEED_CUDA_LIBRARY names, with errors that say
// which library was tried and why it failed, and error names even without a driver.
#include "device/cuda_driver.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_cuda_fixture.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string LoadError(const std::string& library) {
  try {
    CudaDriver::Load(library);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    return e.what();
  }
  ADD_FAILURE() << "loading " << library << " should fail";
  return "";
}

class CudaDriverTest : public testing::FakeCudaTest {};

TEST_F(CudaDriverTest, GetLoadsTheLibraryTheEnvironmentNames) {
  const CudaDriver& driver = CudaDriver::Get();
  EXPECT_EQ(driver.library(), GPUFEED_FAKE_CUDA);
  EXPECT_TRUE(driver.is_fake());
  EXPECT_EQ(&driver, &CudaDriver::Load(GPUFEED_FAKE_CUDA));  // loaded once
  int version = 0;
  EXPECT_EQ(driver.DriverGetVersion(&version), kSuccess);
  EXPECT_GT(version, 11000);
}

// Drivers before 12.8 export only cuEventElapsedTime: the table falls back to it, and it
// times events as the `_v2` one does.
TEST_F(CudaDriverTest, WithoutTheV2SymbolEventsAreTimedThroughTheUnversionedOne) {
  const CudaDriver& driver = CudaDriver::Load(GPUFEED_FAKE_CUDA_NO_V2);
  ASSERT_NE(driver.EventElapsedTime, nullptr);
  void* handle = dlopen(GPUFEED_FAKE_CUDA_NO_V2, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(dlsym(handle, "cuEventElapsedTime_v2"), nullptr);
  EXPECT_EQ(reinterpret_cast<void*>(driver.EventElapsedTime), dlsym(handle, "cuEventElapsedTime"));
  dlclose(handle);
  ASSERT_EQ(driver.Init(0), kSuccess);
  CUdevice device = 0;
  ASSERT_EQ(driver.DeviceGet(&device, 0), kSuccess);
  CUcontext context = nullptr;
  ASSERT_EQ(driver.DevicePrimaryCtxRetain(&context, device), kSuccess);
  ASSERT_EQ(driver.CtxSetCurrent(context), kSuccess);
  CUevent start = nullptr;
  CUevent end = nullptr;
  ASSERT_EQ(driver.EventCreate(&start, kEventDefault), kSuccess);
  ASSERT_EQ(driver.EventCreate(&end, kEventDefault), kSuccess);
  ASSERT_EQ(driver.EventRecord(start, nullptr), kSuccess);
  ASSERT_EQ(driver.EventRecord(end, nullptr), kSuccess);
  ASSERT_EQ(driver.EventSynchronize(end), kSuccess);
  float ms = -1;
  EXPECT_EQ(driver.EventElapsedTime(&ms, start, end), kSuccess);
  EXPECT_GE(ms, 0);
  EXPECT_EQ(driver.EventDestroy(start), kSuccess);
  EXPECT_EQ(driver.EventDestroy(end), kSuccess);
  EXPECT_EQ(driver.CtxSetCurrent(nullptr), kSuccess);
  EXPECT_EQ(driver.DevicePrimaryCtxRelease(device), kSuccess);
}

TEST_F(CudaDriverTest, DefaultLibraryIsTheDriverSoname) {
  unsetenv("GPUFEED_CUDA_LIBRARY");
  EXPECT_EQ(CudaDriver::DefaultLibrary(), "libcuda.so.1");
  setenv("GPUFEED_CUDA_LIBRARY", "", 1);
  EXPECT_EQ(CudaDriver::DefaultLibrary(), "libcuda.so.1");
}

TEST_F(CudaDriverTest, MissingLibraryNamesItAndCarriesDlerror) {
  EXPECT_THAT(LoadError("/nonexistent/libcuda.so.1"),
              AllOf(HasSubstr("/nonexistent/libcuda.so.1"), HasSubstr("No such file")));
  setenv("GPUFEED_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  try {
    CudaDriver::Get();
    ADD_FAILURE() << "Get() should fail";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'/nonexistent/libcuda.so.1' (from GPUFEED_CUDA_LIBRARY)"));
  }
}

TEST_F(CudaDriverTest, LibraryWithoutTheDriverSymbolsIsRefusedWhole) {
  EXPECT_THAT(LoadError("libm.so.6"),
              AllOf(HasSubstr("libm.so.6"), HasSubstr("lacks cuInit"), HasSubstr("undefined")));
  // Not cached: asking again fails the same way rather than handing out an empty table.
  EXPECT_THAT(LoadError("libm.so.6"), HasSubstr("lacks cuInit"));
}

TEST_F(CudaDriverTest, ErrorNamesComeFromTheDriverThenTheLocalTable) {
  const CudaDriver& driver = CudaDriver::Get();
  EXPECT_EQ(driver.ErrorName(2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(driver.Describe(2), "CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  // The fake does not know 803; the local table does.
  EXPECT_EQ(driver.ErrorName(803), "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
  EXPECT_EQ(driver.ErrorName(12345), "CUDA error 12345");
  EXPECT_EQ(FallbackErrorName(100), "CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(FallbackErrorName(12345), "");
}

TEST_F(CudaDriverTest, CheckThrowsADeviceErrorNamingTheCall) {
  const CudaDriver& driver = CudaDriver::Get();
  EXPECT_NO_THROW(driver.Check(kSuccess, "cuInit"));
  try {
    driver.Check(kErrorInvalidDevice, "cuDeviceGet");
    FAIL() << "Check should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("cuDeviceGet"), HasSubstr("CUDA_ERROR_INVALID_DEVICE")));
  }
}

}  // namespace
}  // namespace gpufeed::cuda
