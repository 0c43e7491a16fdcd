#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <string_view>

#include "device/cuda_device.h"
#include "gpufeed/device.h"
#include "core/log.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

Error BadSpec(const std::string& spec) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("unknown device '{}' (expected cpu, auto, cuda or cuda:N)", spec));
}

}  // namespace

std::shared_ptr<Device> OpenDevice(const std::string& spec) {
  if (spec == "cpu") return HostDevice();
  if (spec == "auto") {
    try {
      return cuda::OpenCudaDevice();
    } catch (const Error& e) {
      // A bad LOCAL_RANK is the user's to fix, not a reason to train on the CPU.
      if (e.code() != ErrorCode::kDevice) throw;
      // One line: "auto" is the default in scripts that also run on laptops.
      Log(LogLevel::kInfo, fmt::format("device auto -> cpu: {}", e.what()));
      return HostDevice();
    }
  }
  if (spec == "cuda") return cuda::OpenCudaDevice();
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string_view digits = std::string_view(spec).substr(5);
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
        ordinal < 0) {
      throw BadSpec(spec);
    }
    return cuda::OpenCudaDevice({.ordinal = ordinal, .library = {}});
  }
  throw BadSpec(spec);
}

}  // namespace gpufeed
