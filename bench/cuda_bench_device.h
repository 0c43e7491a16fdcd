// The CUDA device a GPU benchmark measures: opened from its --device spec, named with its
// product and driver on stdout, and flagged when the driver is gpufeed's fake libcuda (whose
// figures say nothing about a GPU). Shared by bench_h2d_copy and bench_cache_device_gather.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "device/cuda_device.h"
#include "gpufeed/device.h"

namespace gpufeed::bench {

// Null (after a message on stderr) when `spec` is not a CUDA device. Throws what OpenDevice
// throws. `fake_does` says what the fake does in place of the GPU work measured.
inline std::shared_ptr<cuda::CudaDevice> OpenBenchCudaDevice(const std::string& spec,
                                                             const char* program,
                                                             const char* fake_does) {
  auto cuda = std::dynamic_pointer_cast<cuda::CudaDevice>(OpenDevice(spec));
  if (cuda == nullptr) {
    std::fprintf(stderr, "%s: device '%s' is not a CUDA device\n", program, spec.c_str());
    return nullptr;
  }
  std::printf("device: %s (%s), driver %s\n", cuda->name().c_str(), cuda->product_name().c_str(),
              cuda->driver().library().c_str());
  if (cuda->driver().is_fake()) {
    std::printf(
        "NOTE: the driver is gpufeed's fake libcuda (a test double: %s); these figures "
        "say nothing about a GPU\n",
        fake_does);
  }
  return cuda;
}

}  // namespace gpufeed::bench
