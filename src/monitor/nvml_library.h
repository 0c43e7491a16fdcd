// NvmlLibrary: libnvidia-ml.so.1 opened with dlopen and its functions in one typed table.
//
// The table lists every symbol once (c10's driver_api habit), each pointer typed from its
// signature. Versioned symbols are looked up newest first (nvmlInit_v2, then nvmlInit) and
// stored under one name; a symbol the library lacks is a null pointer, which callers treat
// as "not supported". The library is opened RTLD_LOCAL, so its symbols never leak into the
// process, and nvmlInit is called once; the destructor calls nvmlShutdown and dlclose.
// Thread-safety: after Open returns, the table is immutable; NVML itself is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "monitor/nvml_api.h"

namespace gpufeed {

// X(member, signature, symbol names newest first...). Required entries come first.
#define GPUFEED_NVML_REQUIRED(X)                                                                \
  X(Init, nvml::Return(), "nvmlInit_v2", "nvmlInit")                                            \
  X(Shutdown, nvml::Return(), "nvmlShutdown")                                                   \
  X(DeviceGetCount, nvml::Return(unsigned int*), "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount") \
  X(DeviceGetHandleByIndex, nvml::Return(unsigned int, nvml::Device*),                          \
    "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex")

#define GPUFEED_NVML_OPTIONAL(X)                                                                  \
  X(ErrorString, const char*(nvml::Return), "nvmlErrorString")                                    \
  X(DeviceGetName, nvml::Return(nvml::Device, char*, unsigned int), "nvmlDeviceGetName")          \
  X(DeviceGetUtilizationRates, nvml::Return(nvml::Device, nvml::Utilization*),                    \
    "nvmlDeviceGetUtilizationRates")                                                              \
  X(DeviceGetMemoryInfoV2, nvml::Return(nvml::Device, nvml::MemoryV2*),                           \
    "nvmlDeviceGetMemoryInfo_v2")                                                                 \
  X(DeviceGetMemoryInfo, nvml::Return(nvml::Device, nvml::Memory*), "nvmlDeviceGetMemoryInfo")    \
  X(DeviceGetPowerUsage, nvml::Return(nvml::Device, unsigned int*), "nvmlDeviceGetPowerUsage")    \
  X(DeviceGetTemperature, nvml::Return(nvml::Device, int, unsigned int*),                         \
    "nvmlDeviceGetTemperature")                                                                   \
  X(DeviceGetClockInfo, nvml::Return(nvml::Device, int, unsigned int*), "nvmlDeviceGetClockInfo") \
  X(DeviceGetPcieThroughput, nvml::Return(nvml::Device, int, unsigned int*),                      \
    "nvmlDeviceGetPcieThroughput")                                                                \
  X(DeviceGetComputeRunningProcessesV3,                                                           \
    nvml::Return(nvml::Device, unsigned int*, nvml::ProcessInfo*),                                \
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")         \
  X(DeviceGetComputeRunningProcessesV1,                                                           \
    nvml::Return(nvml::Device, unsigned int*, nvml::ProcessInfoV1*),                              \
    "nvmlDeviceGetComputeRunningProcesses")                                                       \
  X(DeviceGetProcessUtilization,                                                                  \
    nvml::Return(nvml::Device, nvml::ProcessUtilizationSample*, unsigned int*,                    \
                 unsigned long long),                                                             \
    "nvmlDeviceGetProcessUtilization")

class NvmlLibrary {
 public:
  // Opens `path` (empty: $GPUFEED_NVML_LIBRARY, else "libnvidia-ml.so.1") and calls
  // nvmlInit. Throws Error(kNotFound) carrying dlerror() when the library or a required
  // symbol is missing, Error(kDevice) naming the NVML error when nvmlInit fails.
  static std::unique_ptr<NvmlLibrary> Open(const std::string& path);
  ~NvmlLibrary();

  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // The path that was opened.
  const std::string& path() const { return path_; }
  // "NVML_ERROR_NOT_SUPPORTED (3)" style text, through nvmlErrorString where present.
  std::string ErrorText(nvml::Return code) const;

#define GPUFEED_NVML_MEMBER(member, signature, ...) std::add_pointer_t<signature> member = nullptr;
  GPUFEED_NVML_REQUIRED(GPUFEED_NVML_MEMBER)
  GPUFEED_NVML_OPTIONAL(GPUFEED_NVML_MEMBER)
#undef GPUFEED_NVML_MEMBER

 private:
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string path_;
};

}  // namespace gpufeed
