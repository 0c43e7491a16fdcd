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

struct NamedResult {
  CUresult code;
  const char* name;
};

constexpr NamedResult kFallbackNames[] = {
    {0, "CUDA_SUCCESS"},
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {800, "CUDA_ERROR_NOT_PERMITTED"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

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
  const auto optional = [&](const char* symbol, const char* older) {
    void* p = dlsym(handle, symbol);
    return p != nullptr ? p : dlsym(handle, older);
  };
#define GPUFEED_CUDA_OPTIONAL(member, symbol, base, signature, older) \
  member = reinterpret_cast<std::add_pointer_t<signature>>(optional(symbol, older));
  GPUFEED_CUDA_DRIVER_OPTIONAL_SYMBOLS(GPUFEED_CUDA_OPTIONAL)
#undef GPUFEED_CUDA_OPTIONAL
  is_fake_ = dlsym(handle, "fake_cuda_failures") != nullptr;
  WatchForFork();
}

std::string_view FallbackErrorName(CUresult result) {
  for (const NamedResult& r : kFallbackNames) {
    if (r.code == result) return r.name;
  }
  return {};
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
