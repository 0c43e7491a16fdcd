#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <string_view>

#include "device/cuda_device.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

Error BadSpec(const std::string& spec) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("unknown device '{}' (expected cpu, auto, cuda or cuda:N)", spec));
}

}  // namespace

std::string_view DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCuda ? "cuda" : "cpu";
}

std::string DeviceId::ToString() const {
  if (type == DeviceType::kCpu) return "cpu";
  return fmt::format("{}:{}", DeviceTypeName(type), ordinal);
}

std::optional<DeviceId> DeviceId::Parse(std::string_view text) {
  if (text == "cpu") return Cpu();
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.substr(0, kCudaPrefix.size()) != kCudaPrefix) return std::nullopt;
  const std::string_view digits = text.substr(kCudaPrefix.size());
  int ordinal = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || ordinal < 0) {
    return std::nullopt;
  }
  return Cuda(ordinal);
}

std::shared_ptr<Device> OpenDevice(const std::string& spec) {
  if (spec == "auto") {
    try {
      return cuda::OpenCudaDevice();
    } catch (const Error& e) {
      // A bad LOCAL_RANK is the user's to fix, not a reason to train on the CPU.
      if (e.code() != ErrorCode::kDevice) throw;
      // One line: "auto" is the default in scripts that also run on laptops.
      std::fprintf(stderr, "gpufeed: device auto -> cpu: %s\n", e.what());
      return HostDevice();
    }
  }
  if (spec == "cuda") return cuda::OpenCudaDevice();
  const std::optional<DeviceId> id = DeviceId::Parse(spec);
  if (!id) throw BadSpec(spec);
  if (!id->is_cuda()) return HostDevice();
  return cuda::OpenCudaDevice({.ordinal = id->ordinal, .library = {}});
}

}  // namespace gpufeed
