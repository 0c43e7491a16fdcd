#include "monitor/nvml_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <initializer_list>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

// The first of `names` the library exports, or null.
void* FindSymbol(void* handle, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = dlsym(handle, name)) return symbol;
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<NvmlLibrary> NvmlLibrary::Open(const std::string& path) {
  std::unique_ptr<NvmlLibrary> library(new NvmlLibrary());
  library->path_ = path;
  if (library->path_.empty()) {
    const char* env = std::getenv("GPUFEED_NVML_LIBRARY");
    library->path_ = (env != nullptr && *env != '\0') ? env : kDefaultLibrary;
  }
  dlerror();
  library->handle_ = dlopen(library->path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library->handle_ == nullptr) {
    const char* why = dlerror();
    throw Error(ErrorCode::kNotFound, fmt::format("cannot load the NVML library {}: {}",
                                                  library->path_, why ? why : "unknown"));
  }
  void* handle = library->handle_;
#define GPUFEED_NVML_LOAD_REQUIRED(member, signature, ...)                                        \
  library->member =                                                                               \
      reinterpret_cast<std::add_pointer_t<signature>>(FindSymbol(handle, {__VA_ARGS__}));         \
  if (library->member == nullptr) {                                                               \
    throw Error(ErrorCode::kNotFound,                                                             \
                fmt::format("the NVML library {} lacks the symbol {}", library->path_, #member)); \
  }
#define GPUFEED_NVML_LOAD_OPTIONAL(member, signature, ...) \
  library->member =                                        \
      reinterpret_cast<std::add_pointer_t<signature>>(FindSymbol(handle, {__VA_ARGS__}));
  GPUFEED_NVML_REQUIRED(GPUFEED_NVML_LOAD_REQUIRED)
  GPUFEED_NVML_OPTIONAL(GPUFEED_NVML_LOAD_OPTIONAL)
#undef GPUFEED_NVML_LOAD_REQUIRED
#undef GPUFEED_NVML_LOAD_OPTIONAL

  nvml::Return rc = library->Init();
  if (rc != nvml::kSuccess) {
    throw Error(ErrorCode::kDevice,
                fmt::format("nvmlInit in {} failed: {}", library->path_, library->ErrorText(rc)));
  }
  library->initialized_ = true;
  return library;
}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_) Shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

std::string NvmlLibrary::ErrorText(nvml::Return code) const {
  if (ErrorString != nullptr) {
    if (const char* text = ErrorString(code)) return fmt::format("{} ({})", text, code);
  }
  return fmt::format("NVML error {}", code);
}

}  // namespace gpufeed
