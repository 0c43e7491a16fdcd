#include "device/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "device/cuda_context.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

constexpr const char* kDefaultLibrary = "libcuda.so.1";

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "no detail from dlerror()";
}

}  // namespace

std::string CudaDriver::DefaultLibrary() {
  const char* env = std::getenv("GPUFEED_CUDA_LIBRARY");
  return env != nullptr && *env != '\0' ? env : kDefaultLibrary;
}

const CudaDriver& CudaDriver::Get() { return Load(DefaultLibrary()); }

const CudaDriver& CudaDriver::Load(const std::string& library) {
  // Tables are never destroyed: the driver must outlive every static that still holds a
  // stream or an allocation at exit. Failures are not cached, so a later call may retry.
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::unique_ptr<CudaDriver>>();
  std::lock_guard lock(mu);
  auto it = loaded->find(library);
  if (it != loaded->end()) return *it->second;
  std::unique_ptr<CudaDriver> driver(new CudaDriver(library));
  return *loaded->emplace(library, std::move(driver)).first->second;
}

CudaDriver::CudaDriver(std::string library) : library_(std::move(library)) {
  const char* env = std::getenv("GPUFEED_CUDA_LIBRARY");
  const bool from_env = env != nullptr && library_ == env;
  dlerror();
  // RTLD_LOCAL: the driver's cu* names must not leak into the global namespace, where they
  // could shadow the real driver for PyTorch in the same process.
  void* handle = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error(ErrorCode::kDevice,
                fmt::format("cannot load the CUDA driver '{}'{}: {}", library_,
                            from_env ? " (from GPUFEED_CUDA_LIBRARY)" : "", DlError()));
  }
  // Fill a local table first so a missing symbol never leaves a half-initialized one.
  const auto resolve = [&](const char* symbol) {
    dlerror();
    void* p = dlsym(handle, symbol);
    if (p == nullptr) {
      const std::string why = DlError();
      dlclose(handle);
      throw Error(ErrorCode::kDevice,
                  fmt::format("the CUDA driver '{}' lacks {} ({}): it is not a CUDA driver or "
                              "is older than CUDA 11",
                              library_, symbol, why));
    }
    return p;
  };
#define GPUFEED_CUDA_RESOLVE(member, symbol, base, signature) \
  auto member##_resolved = reinterpret_cast<std::add_pointer_t<signature>>(resolve(symbol));
  GPUFEED_CUDA_DRIVER_SYMBOLS(GPUFEED_CUDA_RESOLVE)
#undef GPUFEED_CUDA_RESOLVE
#define GPUFEED_CUDA_ASSIGN(member, symbol, base, signature) member = member##_resolved;
  GPUFEED_CUDA_DRIVER_SYMBOLS(GPUFEED_CUDA_ASSIGN)
#undef GPUFEED_CUDA_ASSIGN
  is_fake_ = dlsym(handle, "fake_cuda_failures") != nullptr;
  WatchForFork();
}

std::string_view FallbackErrorName(CUresult result) {
  switch (result) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return {};
  }
}

std::string CudaDriver::ErrorName(CUresult result) const {
  const char* name = nullptr;
  if (GetErrorName(result, &name) == kSuccess && name != nullptr) return name;
  const std::string_view fallback = FallbackErrorName(result);
  if (!fallback.empty()) return std::string(fallback);
  return fmt::format("CUDA error {}", result);
}

std::string CudaDriver::Describe(CUresult result) const {
  const char* text = nullptr;
  if (GetErrorString(result, &text) == kSuccess && text != nullptr) {
    return fmt::format("{} ({})", ErrorName(result), text);
  }
  return ErrorName(result);
}

void CudaDriver::Check(CUresult result, std::string_view what) const {
  if (result == kSuccess) return;
  throw Error(ErrorCode::kDevice, fmt::format("{}: {}", what, Describe(result)));
}

}  // namespace gpufeed::cuda
