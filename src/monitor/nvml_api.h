// The slice of the NVML C ABI gpufeed uses, declared here so that no NVIDIA header is needed
// (nvtop's habit). Sizes and offsets are those of nvml.h (API 13, x86-64 Linux); see
// ../shared/notes/nvml-procfs.md section 2. The static_asserts pin them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufeed::nvml {

using Return = int;  // nvmlReturn_t: every NVML enum is a 4-byte int
constexpr Return kSuccess = 0;
constexpr Return kErrorUninitialized = 1;
constexpr Return kErrorInvalidArgument = 2;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNoPermission = 4;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorInsufficientSize = 7;
constexpr Return kErrorDriverNotLoaded = 9;
constexpr Return kErrorFunctionNotFound = 13;
constexpr Return kErrorGpuIsLost = 15;

constexpr int kTemperatureGpu = 0;
constexpr int kClockSm = 1;
constexpr int kPcieTxBytes = 0;
constexpr int kPcieRxBytes = 1;
constexpr unsigned kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned long long kValueNotAvailable = ~0ULL;

struct DeviceSt;
using Device = DeviceSt*;

struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // v1: includes memory the driver reserves
};

struct MemoryV2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the size in the low bits, the version in the top byte.
constexpr unsigned int kMemoryV2Version = sizeof(MemoryV2) | (2u << 24);

struct ProcessInfoV1 {
  unsigned int pid;
  unsigned long long used_gpu_memory;
};

struct ProcessInfo {  // nvmlProcessInfo_t (v2), used by the _v2 and _v3 calls
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long time_stamp;  // CPU microseconds
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};

static_assert(sizeof(Utilization) == 8);
static_assert(sizeof(Memory) == 24);
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8 &&
              offsetof(MemoryV2, used) == 32);
static_assert(kMemoryV2Version == 0x02000028);
static_assert(sizeof(ProcessInfoV1) == 16);
static_assert(sizeof(ProcessInfo) == 24 && offsetof(ProcessInfo, gpu_instance_id) == 16);
static_assert(sizeof(ProcessUtilizationSample) == 32 &&
              offsetof(ProcessUtilizationSample, sm_util) == 16);

}  // namespace gpufeed::nvml
