// Compile-time check of the driver table against the toolkit's cuda.h, built only where a
// cuda.h exists. For every entry: the symbol we dlsym is the name cuda.h maps the base name
// to (`cuMemAlloc` -> `cuMemAlloc_v2`, never the legacy 32-bit ABI), and our signature has
// the same shape as cuda.h's (arity, and per parameter: pointer depth, constness, size).
// Constants are compared by value. This file only compiles the checks; it links no driver.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <string_view>
#include <tuple>
#include <type_traits>

#include "device/cuda_driver.h"

namespace gpufeed::cuda {
namespace {

template <typename A, typename B>
constexpr bool SameShape() {
  if constexpr (std::is_pointer_v<A> != std::is_pointer_v<B>) {
    return false;
  } else if constexpr (std::is_pointer_v<A>) {
    using PA = std::remove_pointer_t<A>;
    using PB = std::remove_pointer_t<B>;
    if constexpr (std::is_const_v<PA> != std::is_const_v<PB>) {
      return false;
    } else if constexpr (std::is_void_v<PA> || std::is_void_v<PB>) {
      return std::is_void_v<PA> && std::is_void_v<PB>;
    } else if constexpr (std::is_function_v<PA> || std::is_function_v<PB>) {
      return std::is_same_v<PA, PB>;  // callbacks (CUhostFn): CUDA_CB is empty on Linux
    } else if constexpr (std::is_class_v<PA> || std::is_class_v<PB>) {
      return std::is_class_v<PA> && std::is_class_v<PB>;  // opaque handles
    } else {
      return SameShape<std::remove_cv_t<PA>, std::remove_cv_t<PB>>();
    }
  } else {
    constexpr bool a_int = std::is_integral_v<A> || std::is_enum_v<A>;
    constexpr bool b_int = std::is_integral_v<B> || std::is_enum_v<B>;
    return a_int == b_int && sizeof(A) == sizeof(B);
  }
}

template <typename A, typename B>
struct SameFunction : std::false_type {};
template <typename RA, typename... A, typename RB, typename... B>
struct SameFunction<RA (*)(A...), RB (*)(B...)> {
  static constexpr bool Params() {
    if constexpr (sizeof...(A) != sizeof...(B)) {
      return false;
    } else {
      return (SameShape<A, B>() && ...);
    }
  }
  static constexpr bool value = SameShape<RA, RB>() && Params();
};

#define GPUFEED_STR(x) #x
#define GPUFEED_XSTR(x) GPUFEED_STR(x)
#define GPUFEED_CHECK_ENTRY(member, symbol, base, signature)                          \
  static_assert(SameFunction<decltype(CudaDriver::member), decltype(&::base)>::value, \
                symbol ": our signature differs from cuda.h's " #base);               \
  static_assert(std::string_view(symbol) == std::string_view(GPUFEED_XSTR(base)),     \
                "we dlsym " symbol " but cuda.h maps " #base " to " GPUFEED_XSTR(base));
GPUFEED_CUDA_DRIVER_SYMBOLS(GPUFEED_CHECK_ENTRY)
// Optional symbols: the preferred name is the one cuda.h maps to; the older fallback has the
// same signature (PFN_cuEventElapsedTime_v2000 and _v12080 in cudaTypedefs.h).
#define GPUFEED_CHECK_OPTIONAL(member, symbol, base, signature, older) \
  GPUFEED_CHECK_ENTRY(member, symbol, base, signature)
GPUFEED_CUDA_DRIVER_OPTIONAL_SYMBOLS(GPUFEED_CHECK_OPTIONAL)
#undef GPUFEED_CHECK_OPTIONAL
#undef GPUFEED_CHECK_ENTRY
static_assert(SameFunction<decltype(CudaDriver::EventElapsedTime),
                           PFN_cuEventElapsedTime_v2000>::value,
              "the pre-12.8 fallback cuEventElapsedTime has another signature");

static_assert(sizeof(CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(CUresult) == sizeof(::CUresult));
static_assert(kSuccess == CUDA_SUCCESS);
static_assert(kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(kErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(kErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(kErrorDeinitialized == CUDA_ERROR_DEINITIALIZED);
#if CUDA_VERSION >= 11010
static_assert(kErrorStubLibrary == CUDA_ERROR_STUB_LIBRARY);
#endif
static_assert(kErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(kErrorInvalidDevice == CUDA_ERROR_INVALID_DEVICE);
static_assert(kErrorInvalidContext == CUDA_ERROR_INVALID_CONTEXT);
static_assert(kErrorInvalidHandle == CUDA_ERROR_INVALID_HANDLE);
static_assert(kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(kErrorNotFound == CUDA_ERROR_NOT_FOUND);
static_assert(kErrorIllegalAddress == CUDA_ERROR_ILLEGAL_ADDRESS);
static_assert(kErrorMisalignedAddress == CUDA_ERROR_MISALIGNED_ADDRESS);
static_assert(kErrorNotSupported == CUDA_ERROR_NOT_SUPPORTED);
static_assert(kIpcHandleSize == CU_IPC_HANDLE_SIZE);
static_assert(sizeof(CUipcMemHandle) == sizeof(::CUipcMemHandle));
static_assert(CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT == 0x01);
static_assert(CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT == 0x02);
static_assert(CU_LAUNCH_PARAM_END_AS_INT == 0x00);
static_assert(kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(kEventDefault == CU_EVENT_DEFAULT);
static_assert(kEventWaitDefault == CU_EVENT_WAIT_DEFAULT);
static_assert(kStreamCaptureStatusNone == CU_STREAM_CAPTURE_STATUS_NONE);

// The fallback names agree with the toolkit's enum for the codes they name.
static_assert(CUDA_ERROR_ILLEGAL_ADDRESS == 700 && CUDA_ERROR_SYSTEM_DRIVER_MISMATCH == 803);

TEST(CudaDriverAbiTest, TableMatchesCudaHeaderAtCompileTime) {
  SUCCEED() << "checked against CUDA_VERSION " << CUDA_VERSION;
}

}  // namespace
}  // namespace gpufeed::cuda
