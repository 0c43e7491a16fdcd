// CudaDriver: the CUDA driver API, found at run time. gpufeed never links CUDA: the driver
// (libcuda.so.1, or the library $GPUFEED_CUDA_LIBRARY names) is opened with
// dlopen(RTLD_NOW | RTLD_LOCAL) on first use and its symbols land in one typed table. A
// library or symbol that cannot be had is an Error(kDevice) carrying dlerror() and the
// library tried; a table is either complete or not handed out at all.
//
// The types below are our own minimal declarations (no cuda.h): opaque handles and an int
// result. Where cuda.h exists on the build machine, tests/device/cuda_driver_abi_test.cc
// checks every signature, the `_v2` names and the constants against it.
//
// Thread-safety: Get() and Load() are thread-safe; a loaded table is immutable and lives
// until the process exits (a driver is never unloaded: other libraries may share it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace gpufeed::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // 64-bit Linux: pointer-sized
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmod_st;
struct CUfunc_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
// cuda.h's CUipcMemHandle: an opaque 64-byte handle passed by value.
inline constexpr size_t kIpcHandleSize = 64;  // CU_IPC_HANDLE_SIZE
struct CUipcMemHandle {
  char reserved[kIpcHandleSize];
};

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorInvalidValue = 1;
inline constexpr CUresult kErrorOutOfMemory = 2;
inline constexpr CUresult kErrorNotInitialized = 3;
inline constexpr CUresult kErrorDeinitialized = 4;
inline constexpr CUresult kErrorStubLibrary = 34;
inline constexpr CUresult kErrorNoDevice = 100;
inline constexpr CUresult kErrorInvalidDevice = 101;
inline constexpr CUresult kErrorInvalidContext = 201;
inline constexpr CUresult kErrorInvalidHandle = 400;
inline constexpr CUresult kErrorNotFound = 500;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr CUresult kErrorIllegalAddress = 700;
inline constexpr CUresult kErrorMisalignedAddress = 716;
inline constexpr CUresult kErrorNotSupported = 801;

inline constexpr unsigned int kMemHostAllocPortable = 0x01;  // pinned for every context
inline constexpr unsigned int kStreamNonBlocking = 0x1;      // no implicit sync with stream 0
inline constexpr unsigned int kEventDefault = 0x0;           // timing enabled
inline constexpr unsigned int kEventDisableTiming = 0x2;     // the cheapest event: sync only
inline constexpr unsigned int kEventWaitDefault = 0x0;
inline constexpr int kStreamCaptureStatusNone = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
// cuLaunchKernel's `extra` keys: the packed parameter buffer and its size.
inline void* const kLaunchParamEnd = nullptr;
inline void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(0x01);
inline void* const kLaunchParamBufferSize = reinterpret_cast<void*>(0x02);

// X(Member, "symbol to dlsym", cuda.h base name, signature). The symbol is the one cuda.h
// maps the base name to (`cuMemAlloc` -> `cuMemAlloc_v2`): the unversioned exports keep the
// old 32-bit ABI (notes section 1.5). The base name is only used by the ABI test.
#define GPUFEED_CUDA_DRIVER_SYMBOLS(X)                                                      \
  X(Init, "cuInit", cuInit, CUresult(unsigned int))                                         \
  X(DriverGetVersion, "cuDriverGetVersion", cuDriverGetVersion, CUresult(int*))             \
  X(DeviceGetCount, "cuDeviceGetCount", cuDeviceGetCount, CUresult(int*))                   \
  X(DeviceGet, "cuDeviceGet", cuDeviceGet, CUresult(CUdevice*, int))                        \
  X(DeviceGetName, "cuDeviceGetName", cuDeviceGetName, CUresult(char*, int, CUdevice))      \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain,           \
    CUresult(CUcontext*, CUdevice))                                                         \
  X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease,     \
    CUresult(CUdevice))                                                                     \
  X(CtxSetCurrent, "cuCtxSetCurrent", cuCtxSetCurrent, CUresult(CUcontext))                 \
  X(CtxGetCurrent, "cuCtxGetCurrent", cuCtxGetCurrent, CUresult(CUcontext*))                \
  X(MemHostAlloc, "cuMemHostAlloc", cuMemHostAlloc, CUresult(void**, size_t, unsigned int)) \
  X(MemFreeHost, "cuMemFreeHost", cuMemFreeHost, CUresult(void*))                           \
  X(MemAlloc, "cuMemAlloc_v2", cuMemAlloc, CUresult(CUdeviceptr*, size_t))                  \
  X(MemFree, "cuMemFree_v2", cuMemFree, CUresult(CUdeviceptr))                              \
  X(MemGetInfo, "cuMemGetInfo_v2", cuMemGetInfo, CUresult(size_t*, size_t*))                \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync,                             \
    CUresult(CUdeviceptr, const void*, size_t, CUstream))                                   \
  X(StreamCreate, "cuStreamCreate", cuStreamCreate, CUresult(CUstream*, unsigned int))      \
  X(StreamDestroy, "cuStreamDestroy_v2", cuStreamDestroy, CUresult(CUstream))               \
  X(StreamSynchronize, "cuStreamSynchronize", cuStreamSynchronize, CUresult(CUstream))      \
  X(StreamQuery, "cuStreamQuery", cuStreamQuery, CUresult(CUstream))                        \
  X(LaunchHostFunc, "cuLaunchHostFunc", cuLaunchHostFunc,                                   \
    CUresult(CUstream, void (*)(void*), void*))                                             \
  X(StreamWaitEvent, "cuStreamWaitEvent", cuStreamWaitEvent,                                \
    CUresult(CUstream, CUevent, unsigned int))                                              \
  X(EventCreate, "cuEventCreate", cuEventCreate, CUresult(CUevent*, unsigned int))          \
  X(EventRecord, "cuEventRecord", cuEventRecord, CUresult(CUevent, CUstream))               \
  X(EventQuery, "cuEventQuery", cuEventQuery, CUresult(CUevent))                            \
  X(EventSynchronize, "cuEventSynchronize", cuEventSynchronize, CUresult(CUevent))          \
  X(EventDestroy, "cuEventDestroy_v2", cuEventDestroy, CUresult(CUevent))                   \
  X(ModuleLoadData, "cuModuleLoadData", cuModuleLoadData, CUresult(CUmodule*, const void*))  \
  X(ModuleUnload, "cuModuleUnload", cuModuleUnload, CUresult(CUmodule))                     \
  X(ModuleGetFunction, "cuModuleGetFunction", cuModuleGetFunction,                          \
    CUresult(CUfunction*, CUmodule, const char*))                                           \
  X(LaunchKernel, "cuLaunchKernel", cuLaunchKernel,                                         \
    CUresult(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,            \
             unsigned int, unsigned int, unsigned int, CUstream, void**, void**))           \
  X(GetErrorName, "cuGetErrorName", cuGetErrorName, CUresult(CUresult, const char**))       \
  X(GetErrorString, "cuGetErrorString", cuGetErrorString, CUresult(CUresult, const char**))

// Symbols the table can do without: X(Member, "symbol", base name, signature, "older symbol").
// A missing one leaves its member null (the feature it serves is off); "older symbol" is
// tried when "symbol" is missing. cuda.h 12.8+ maps cuEventElapsedTime to `_v2` (same C
// signature); drivers before 12.8 (r570) export only the unversioned one, so it is the
// fallback rather than a reason to refuse the driver (notes section 1.6).
// cuStreamIsCapturing (CUDA 10+, no versioned name) tells a stream capturing a CUDA graph,
// which must not be queried; without it the loader does not look.
// cuIpc{Get,Open,Close}MemHandle (CUDA 4.1+; cuda.h 11+ maps cuIpcOpenMemHandle to `_v2`,
// same C signature) share the device cache tier across processes; without them each
// process uploads its own copy. cuMemGetAddressRange_v2 (3.2+) checks that an imported
// handle maps as many bytes as the copy it claims to be.
#define GPUFEED_CUDA_DRIVER_OPTIONAL_SYMBOLS(X)                                     \
  X(EventElapsedTime, "cuEventElapsedTime_v2", cuEventElapsedTime,                  \
    CUresult(float*, CUevent, CUevent), "cuEventElapsedTime")                       \
  X(StreamIsCapturing, "cuStreamIsCapturing", cuStreamIsCapturing,                  \
    CUresult(CUstream, int*), "cuStreamIsCapturing")                                \
  X(IpcGetMemHandle, "cuIpcGetMemHandle", cuIpcGetMemHandle,                        \
    CUresult(CUipcMemHandle*, CUdeviceptr), "cuIpcGetMemHandle")                    \
  X(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", cuIpcOpenMemHandle,                  \
    CUresult(CUdeviceptr*, CUipcMemHandle, unsigned int), "cuIpcOpenMemHandle")     \
  X(IpcCloseMemHandle, "cuIpcCloseMemHandle", cuIpcCloseMemHandle,                  \
    CUresult(CUdeviceptr), "cuIpcCloseMemHandle")                                   \
  X(MemGetAddressRange, "cuMemGetAddressRange_v2", cuMemGetAddressRange,            \
    CUresult(CUdeviceptr*, size_t*, CUdeviceptr), "cuMemGetAddressRange_v2")

class CudaDriver {
 public:
  // The driver $GPUFEED_CUDA_LIBRARY names, else "libcuda.so.1". Throws Error(kDevice)
  // naming the library and carrying dlerror() when it or one of its symbols is missing.
  static const CudaDriver& Get();
  // The driver at `library` (a path or a soname), loaded once per distinct name.
  static const CudaDriver& Load(const std::string& library);
  // What Get() loads: $GPUFEED_CUDA_LIBRARY when set and not empty, else "libcuda.so.1".
  static std::string DefaultLibrary();

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  const std::string& library() const { return library_; }
  // True for gpufeed's test double (it exports fake_cuda_failures): its figures mean nothing.
  bool is_fake() const { return is_fake_; }

  // "CUDA_ERROR_OUT_OF_MEMORY": from the driver, else a local table, else "CUDA error N".
  std::string ErrorName(CUresult result) const;
  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string Describe(CUresult result) const;
  // Throws Error(kDevice, "<what>: <Describe(result)>") unless result is kSuccess.
  void Check(CUresult result, std::string_view what) const;

#define GPUFEED_CUDA_MEMBER(member, symbol, base, signature) \
  std::add_pointer_t<signature> member = nullptr;
  GPUFEED_CUDA_DRIVER_SYMBOLS(GPUFEED_CUDA_MEMBER)
#undef GPUFEED_CUDA_MEMBER
#define GPUFEED_CUDA_OPTIONAL_MEMBER(member, symbol, base, signature, older) \
  std::add_pointer_t<signature> member = nullptr;
  GPUFEED_CUDA_DRIVER_OPTIONAL_SYMBOLS(GPUFEED_CUDA_OPTIONAL_MEMBER)
#undef GPUFEED_CUDA_OPTIONAL_MEMBER

 private:
  explicit CudaDriver(std::string library);

  std::string library_;
  bool is_fake_ = false;
};

// The error name for codes that matter, for when no driver could answer.
std::string_view FallbackErrorName(CUresult result);

}  // namespace gpufeed::cuda
