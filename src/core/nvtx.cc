#include "core/nvtx.h"

#include <dlfcn.h>

#include <cstdlib>

namespace gpufeed {
namespace {

// NVTX's C API (nvToolsExt.h): the two entry points gpufeed uses.
using RangePushFn = int (*)(const char*);
using RangePopFn = int (*)();

struct NvtxLibrary {
  RangePushFn push = nullptr;
  RangePopFn pop = nullptr;

  NvtxLibrary() {
    const char* name = std::getenv("GPUFEED_NVTX_LIBRARY");
    void* handle = dlopen(name != nullptr && *name != '\0' ? name : "libnvToolsExt.so.1",
                          RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return;  // absent: no ranges, no message
    auto p = reinterpret_cast<RangePushFn>(dlsym(handle, "nvtxRangePushA"));
    auto q = reinterpret_cast<RangePopFn>(dlsym(handle, "nvtxRangePop"));
    if (p == nullptr || q == nullptr) {
      dlclose(handle);
      return;
    }
    push = p;
    pop = q;  // the library stays loaded for the process's life
  }
};

const NvtxLibrary& Library() {
  static const NvtxLibrary library;
  return library;
}

}  // namespace

bool NvtxEnabled() { return Library().push != nullptr; }

void NvtxPush(const char* name) {
  if (const auto push = Library().push) push(name);
}

void NvtxPop() {
  if (const auto pop = Library().pop) pop();
}

}  // namespace gpufeed
