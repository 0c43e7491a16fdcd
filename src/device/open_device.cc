#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "gpufeed/device.h"
#include "gpufeed/error.h"

namespace gpufeed {

// The CUDA backend is not built yet: "cuda" fails clearly and "auto" falls back to the host.
std::shared_ptr<Device> OpenDevice(const std::string& spec) {
  if (spec == "cpu") return HostDevice();
  if (spec == "auto") {
    std::fprintf(stderr, "gpufeed: no CUDA backend in this build; batches stay on the host\n");
    return HostDevice();
  }
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
    throw Error(ErrorCode::kDevice,
                fmt::format("device '{}': this build of gpufeed has no CUDA backend", spec));
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("unknown device '{}' (expected cpu, auto, cuda or cuda:N)", spec));
}

}  // namespace gpufeed
