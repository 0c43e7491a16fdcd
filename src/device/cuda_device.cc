#include "device/cuda_device.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/text.h"
#include "device/pinned_host_pool.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

std::string VisibleDevicesNote() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible != nullptr ? fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", visible) : "";
}

int DefaultOrdinal() {
  const char* local_rank = std::getenv("LOCAL_RANK");
  if (local_rank == nullptr || *local_rank == '\0') return 0;
  const std::string_view text(local_rank);
  const std::optional<int> value = ParseNumber<int>(text);
  if (!value || *value < 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("LOCAL_RANK='{}' is not a device ordinal (expected an integer >= 0)", text));
  }
  return *value;
}

}  // namespace

CudaDevice::CudaDevice(std::shared_ptr<const CudaContext> context)
    : context_(std::move(context)), counters_(std::make_shared<CudaCounters>()) {}

CudaDevice::~CudaDevice() = default;

void* CudaDevice::AllocHost(size_t bytes) {
  void* ptr = PinnedHostPool::Instance().Take(context_, bytes);
  counters_->host_bytes_allocated.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  return ptr;
}

void CudaDevice::FreeHost(void* ptr) noexcept {
  if (PinnedHostPool::Instance().Give(ptr) || ptr == nullptr || InForkedChild()) return;
  try {  // a buffer the pool did not give: unpinned here
    CurrentContextScope scope(*context_);
    driver().MemFreeHost(ptr);
  } catch (...) {
  }
}

void* CudaDevice::AllocDevice(size_t bytes) {
  CurrentContextScope scope(*context_);
  CUdeviceptr ptr = 0;
  const CUresult result = driver().MemAlloc(&ptr, bytes);
  if (result != kSuccess) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    std::string memory = "device memory free unknown";
    if (driver().MemGetInfo(&free_bytes, &total_bytes) == kSuccess) {
      memory = fmt::format("{} bytes ({:.1f} MiB) of {} ({:.1f} MiB) free on the device",
                           free_bytes, static_cast<double>(free_bytes) / (1 << 20), total_bytes,
                           static_cast<double>(total_bytes) / (1 << 20));
    }
    throw Error(ErrorCode::kDevice,
                fmt::format("{}: cannot allocate a {} byte ({:.1f} MiB) device batch buffer: {}; "
                            "{}; lower batch_size or prefetch",
                            name(), bytes, static_cast<double>(bytes) / (1 << 20),
                            driver().Describe(result), memory));
  }
  counters_->device_bytes_allocated.fetch_add(static_cast<int64_t>(bytes),
                                              std::memory_order_relaxed);
  return reinterpret_cast<void*>(ptr);
}

void CudaDevice::FreeDevice(void* ptr) noexcept {
  try {
    CurrentContextScope scope(*context_);
    driver().MemFree(reinterpret_cast<CUdeviceptr>(ptr));
  } catch (...) {
  }
}

std::string CudaDevice::IpcUnavailable() {
  const CudaDriver& d = driver();
  if (d.IpcGetMemHandle == nullptr || d.IpcOpenMemHandle == nullptr ||
      d.IpcCloseMemHandle == nullptr) {
    return fmt::format("the CUDA driver {} lacks cuIpcGetMemHandle/cuIpcOpenMemHandle",
                       d.library());
  }
  return {};
}

std::array<std::byte, 64> CudaDevice::ExportIpc(void* base) {
  if (std::string why = IpcUnavailable(); !why.empty()) throw Error(ErrorCode::kDevice, why);
  static_assert(sizeof(CUipcMemHandle) == 64);
  CurrentContextScope scope(*context_);
  CUipcMemHandle handle{};
  driver().Check(driver().IpcGetMemHandle(&handle, reinterpret_cast<CUdeviceptr>(base)),
                 fmt::format("{}: cuIpcGetMemHandle", name()));
  std::array<std::byte, 64> out{};
  std::memcpy(out.data(), &handle, sizeof(handle));
  return out;
}

void* CudaDevice::OpenIpc(const std::array<std::byte, 64>& handle, size_t* mapped_bytes) {
  if (std::string why = IpcUnavailable(); !why.empty()) throw Error(ErrorCode::kDevice, why);
  CurrentContextScope scope(*context_);
  CUipcMemHandle h{};
  std::memcpy(&h, handle.data(), sizeof(h));
  CUdeviceptr ptr = 0;
  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the one flag the driver takes here ("must be
  // specified"): a real driver refused flags 0 with CUDA_ERROR_INVALID_VALUE.
  constexpr unsigned int kIpcMemLazyEnablePeerAccess = 1;
  driver().Check(driver().IpcOpenMemHandle(&ptr, h, kIpcMemLazyEnablePeerAccess),
                 fmt::format("{}: cuIpcOpenMemHandle", name()));
  *mapped_bytes = 0;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (driver().MemGetAddressRange != nullptr &&
      driver().MemGetAddressRange(&base, &bytes, ptr) == kSuccess && base == ptr) {
    *mapped_bytes = bytes;
  }
  return reinterpret_cast<void*>(ptr);
}

void CudaDevice::CloseIpc(void* ptr) noexcept {
  try {
    CurrentContextScope scope(*context_);
    driver().IpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(ptr));
  } catch (...) {
  }
}

std::unique_ptr<DeviceStream> CudaDevice::NewStream() {
  return std::make_unique<CudaStream>(context_, counters_);
}

std::shared_ptr<DeviceEvent> CudaDevice::RecordOn(uintptr_t stream) {
  return CudaEvent::RecordOn(context_, reinterpret_cast<CUstream>(stream), *counters_);
}

DeviceMemoryInfo CudaDevice::MemoryInfo() {
  CurrentContextScope scope(*context_);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  context_->Check(driver().MemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  return {free_bytes, total_bytes};
}

std::unique_ptr<TimingEvent> CudaDevice::NewTimingEvent() {
  if (driver().EventElapsedTime == nullptr) return nullptr;
  return std::make_unique<CudaTimingEvent>(context_);
}

bool CudaDevice::StreamDrained(uintptr_t stream) {
  try {
    CurrentContextScope scope(*context_);
    return driver().StreamQuery(reinterpret_cast<CUstream>(stream)) == kSuccess;
  } catch (...) {
    return false;
  }
}

bool CudaDevice::StreamCapturing(uintptr_t stream) {
  // A driver without cuStreamIsCapturing (before CUDA 10) has no graphs to break.
  if (driver().StreamIsCapturing == nullptr) return false;
  try {
    CurrentContextScope scope(*context_);
    int status = kStreamCaptureStatusNone;
    if (driver().StreamIsCapturing(reinterpret_cast<CUstream>(stream), &status) != kSuccess) {
      return true;  // cannot tell: leave the stream alone
    }
    return status != kStreamCaptureStatusNone;
  } catch (...) {
    return true;
  }
}

std::string CudaDevice::product_name() const {
  char buffer[256] = {};
  if (driver().DeviceGetName(buffer, sizeof(buffer) - 1, context_->device()) != kSuccess) {
    return "unknown GPU";
  }
  return buffer;
}

CudaDeviceStats CudaDevice::stats() const {
  CudaDeviceStats s;
  s.copies = counters_->copies.load();
  s.copy_bytes = counters_->copy_bytes.load();
  s.events = counters_->events.load();
  s.gathers = counters_->gathers.load();
  s.gather_bytes = counters_->gather_bytes.load();
  s.host_bytes_allocated = counters_->host_bytes_allocated.load();
  s.device_bytes_allocated = counters_->device_bytes_allocated.load();
  return s;
}

std::shared_ptr<CudaDevice> OpenCudaDevice(const CudaDeviceOptions& options) {
  const CudaDriver& driver =
      options.library.empty() ? CudaDriver::Get() : CudaDriver::Load(options.library);
  const std::string& library = driver.library();
  CheckNotForked(fmt::format("cannot open a CUDA device through '{}'", library));
  // cuInit is cheap to repeat and never cached here: CUDA_VISIBLE_DEVICES may change.
  const CUresult init = driver.Init(0);
  if (init == kErrorStubLibrary) {
    throw Error(ErrorCode::kDevice,
                fmt::format("'{}' is the CUDA toolkit's stub library, not a driver: no NVIDIA "
                            "driver is installed, or the stub shadows it on the library path",
                            library));
  }
  if (init == kErrorNoDevice) {
    throw Error(ErrorCode::kDevice,
                fmt::format("the CUDA driver '{}' sees no GPU{}", library, VisibleDevicesNote()));
  }
  if (init != kSuccess) {
    throw Error(ErrorCode::kDevice, fmt::format("the CUDA driver '{}' failed to initialize: {}",
                                                library, driver.Describe(init)));
  }
  int count = 0;
  driver.Check(driver.DeviceGetCount(&count),
               fmt::format("the CUDA driver '{}': cuDeviceGetCount", library));
  if (count <= 0) {
    throw Error(ErrorCode::kDevice,
                fmt::format("the CUDA driver '{}' sees no GPU{}", library, VisibleDevicesNote()));
  }
  const bool from_local_rank = options.ordinal < 0;
  const int ordinal = from_local_rank ? DefaultOrdinal() : options.ordinal;
  if (ordinal >= count) {
    throw Error(ErrorCode::kDevice,
                fmt::format("there is no cuda:{}{}: the CUDA driver '{}' sees {} GPU{} (cuda:0 to "
                            "cuda:{}){}",
                            ordinal, from_local_rank ? " (from LOCAL_RANK)" : "", library, count,
                            count == 1 ? "" : "s", count - 1, VisibleDevicesNote()));
  }
  return std::make_shared<CudaDevice>(CudaContext::RetainPrimary(driver, ordinal));
}

void CudaDevice::PrepareGather() {
  CurrentContextScope scope(*context_);
  context_->gather_kernels();
}

}  // namespace gpufeed::cuda
