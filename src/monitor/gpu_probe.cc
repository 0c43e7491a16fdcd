#include "monitor/gpu_probe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// How many times a process query is re-asked when processes keep appearing between the
// sizing call and the read.
constexpr int kProcessQueryAttempts = 5;

// Calls `query(count, buffer)` until the buffer is large enough. Nullopt on any error.
template <typename Info, typename Query>
std::optional<std::vector<Info>> QueryProcesses(Query query) {
  std::vector<Info> buffer;
  unsigned int count = 0;
  nvml::Return rc = query(&count, nullptr);
  for (int attempt = 0; attempt < kProcessQueryAttempts; ++attempt) {
    if (rc == nvml::kSuccess) {
      buffer.resize(std::min<size_t>(count, buffer.size()));
      return buffer;
    }
    if (rc != nvml::kErrorInsufficientSize) return std::nullopt;
    buffer.resize(count + count / 2 + 4);  // headroom for processes starting meanwhile
    count = static_cast<unsigned int>(buffer.size());
    rc = query(&count, buffer.data());
  }
  return std::nullopt;
}

// The tree's total, and each tree member's memory into `per_pid` (n/a stays empty).
template <typename Info>
std::optional<uint64_t> SumTreeMemory(const std::vector<Info>& processes,
                                      const std::unordered_set<pid_t>& tree,
                                      std::map<pid_t, GpuProcessSample>* per_pid) {
  uint64_t bytes = 0;
  bool any = false, unknown = false;
  for (const Info& info : processes) {
    const auto pid = static_cast<pid_t>(info.pid);
    if (tree.count(pid) == 0) continue;
    GpuProcessSample& p = (*per_pid)[pid];
    p.pid = pid;
    if (info.used_gpu_memory == nvml::kValueNotAvailable) {
      unknown = true;  // for instance under Windows WDDM or without permission
      continue;
    }
    // A process with several contexts on one GPU is listed once per context.
    p.memory_bytes = p.memory_bytes.value_or(0) + info.used_gpu_memory;
    bytes += info.used_gpu_memory;
    any = true;
  }
  if (!any && unknown) return std::nullopt;
  return bytes;
}

}  // namespace

GpuProbe::GpuProbe(const std::string& library_path) {
  try {
    library_ = NvmlLibrary::Open(library_path);
  } catch (const Error& e) {
    status_ = fmt::format("GPU fields n/a: {}", e.what());
    return;
  }
  unsigned int count = 0;
  nvml::Return rc = library_->DeviceGetCount(&count);
  if (rc != nvml::kSuccess) {
    status_ = fmt::format("GPU fields n/a: nvmlDeviceGetCount in {} failed: {}", library_->path(),
                          library_->ErrorText(rc));
    library_.reset();
    return;
  }
  std::vector<std::string> skipped;
  for (unsigned int i = 0; i < count; ++i) {
    Gpu gpu;
    gpu.index = static_cast<int>(i);
    rc = library_->DeviceGetHandleByIndex(i, &gpu.handle);
    if (rc != nvml::kSuccess) {  // NO_PERMISSION, GPU_IS_LOST, ...: skip that device
      skipped.push_back(fmt::format("GPU {} ({})", i, library_->ErrorText(rc)));
      continue;
    }
    char name[nvml::kDeviceNameBufferSize] = {};
    if (library_->DeviceGetName != nullptr &&
        library_->DeviceGetName(gpu.handle, name, sizeof(name)) == nvml::kSuccess) {
      gpu.name = name;
    }
    gpus_.push_back(std::move(gpu));
  }
  status_ = fmt::format("NVML: {} GPU{} ({})", gpus_.size(), gpus_.size() == 1 ? "" : "s",
                        library_->path());
  if (!skipped.empty()) status_ += fmt::format("; skipped {}", fmt::join(skipped, ", "));
}

GpuProbe::~GpuProbe() = default;

std::vector<GpuSample> GpuProbe::Sample(const std::unordered_set<pid_t>& tree) {
  std::vector<GpuSample> samples;
  if (!library_) return samples;
  const NvmlLibrary& lib = *library_;
  for (Gpu& gpu : gpus_) {
    GpuSample s;
    s.index = gpu.index;
    s.name = gpu.name;
    nvml::Device dev = gpu.handle;
    if (lib.DeviceGetUtilizationRates != nullptr) {
      nvml::Utilization util{};
      if (lib.DeviceGetUtilizationRates(dev, &util) == nvml::kSuccess) {
        s.utilization_ratio = util.gpu / 100.0;
        s.memory_utilization_ratio = util.memory / 100.0;
      }
    }
    // v2 first: on drivers >= 515 the v1 "used" also counts memory the driver reserves.
    bool have_memory = false;
    if (lib.DeviceGetMemoryInfoV2 != nullptr) {
      nvml::MemoryV2 memory{};
      memory.version = nvml::kMemoryV2Version;
      if (lib.DeviceGetMemoryInfoV2(dev, &memory) == nvml::kSuccess) {
        s.memory_used_bytes = memory.used;
        s.memory_total_bytes = memory.total;
        have_memory = true;
      }
    }
    if (!have_memory && lib.DeviceGetMemoryInfo != nullptr) {
      nvml::Memory memory{};
      if (lib.DeviceGetMemoryInfo(dev, &memory) == nvml::kSuccess) {
        s.memory_used_bytes = memory.used;
        s.memory_total_bytes = memory.total;
      }
    }
    unsigned int value = 0;
    if (lib.DeviceGetPowerUsage != nullptr &&
        lib.DeviceGetPowerUsage(dev, &value) == nvml::kSuccess) {
      s.power_watts = value / 1000.0;  // milliwatts
    }
    if (lib.DeviceGetTemperature != nullptr &&
        lib.DeviceGetTemperature(dev, nvml::kTemperatureGpu, &value) == nvml::kSuccess) {
      s.temperature_celsius = value;
    }
    if (lib.DeviceGetClockInfo != nullptr &&
        lib.DeviceGetClockInfo(dev, nvml::kClockSm, &value) == nvml::kSuccess) {
      s.sm_clock_hertz = value * 1e6;  // MHz
    }
    if (lib.DeviceGetPcieThroughput != nullptr) {
      if (lib.DeviceGetPcieThroughput(dev, nvml::kPcieRxBytes, &value) == nvml::kSuccess) {
        s.pcie_rx_bytes_per_second = value * 1024.0;  // KB/s
      }
      if (lib.DeviceGetPcieThroughput(dev, nvml::kPcieTxBytes, &value) == nvml::kSuccess) {
        s.pcie_tx_bytes_per_second = value * 1024.0;
      }
    }
    std::map<pid_t, GpuProcessSample> per_pid;
    s.tree_memory_bytes = TreeMemory(gpu, tree, &per_pid);
    s.tree_sm_utilization_ratio = TreeSmUtilization(gpu, tree, &per_pid);
    for (auto& [pid, p] : per_pid) s.processes.push_back(std::move(p));
    samples.push_back(std::move(s));
  }
  return samples;
}

std::optional<uint64_t> GpuProbe::TreeMemory(const Gpu& gpu, const std::unordered_set<pid_t>& tree,
                                             std::map<pid_t, GpuProcessSample>* per_pid) {
  const NvmlLibrary& lib = *library_;
  if (lib.DeviceGetComputeRunningProcessesV3 != nullptr) {
    auto processes =
        QueryProcesses<nvml::ProcessInfo>([&](unsigned int* count, nvml::ProcessInfo* buffer) {
          return lib.DeviceGetComputeRunningProcessesV3(gpu.handle, count, buffer);
        });
    if (processes) return SumTreeMemory(*processes, tree, per_pid);
  }
  // The unsuffixed call fills the older, 16-byte struct.
  if (lib.DeviceGetComputeRunningProcessesV1 != nullptr) {
    auto processes =
        QueryProcesses<nvml::ProcessInfoV1>([&](unsigned int* count, nvml::ProcessInfoV1* buffer) {
          return lib.DeviceGetComputeRunningProcessesV1(gpu.handle, count, buffer);
        });
    if (processes) return SumTreeMemory(*processes, tree, per_pid);
  }
  return std::nullopt;
}

std::optional<double> GpuProbe::TreeSmUtilization(Gpu& gpu, const std::unordered_set<pid_t>& tree,
                                                  std::map<pid_t, GpuProcessSample>* per_pid) {
  const NvmlLibrary& lib = *library_;
  if (lib.DeviceGetProcessUtilization == nullptr) return std::nullopt;
  std::vector<nvml::ProcessUtilizationSample> buffer;
  unsigned int count = 0;
  nvml::Return rc = lib.DeviceGetProcessUtilization(gpu.handle, nullptr, &count, gpu.last_seen_us);
  for (int attempt = 0; attempt < kProcessQueryAttempts && rc == nvml::kErrorInsufficientSize;
       ++attempt) {
    buffer.resize(count + 4);
    count = static_cast<unsigned int>(buffer.size());
    rc = lib.DeviceGetProcessUtilization(gpu.handle, buffer.data(), &count, gpu.last_seen_us);
  }
  if (rc == nvml::kErrorNotFound) {  // no kernel ran since the last call
    for (auto& [pid, p] : *per_pid) p.sm_utilization_ratio = 0.0;
    return 0.0;
  }
  if (rc != nvml::kSuccess) return std::nullopt;
  buffer.resize(std::min<size_t>(count, buffer.size()));
  // Several samples per pid: keep the newest; drop garbage (util > 100), as nvtop does.
  std::unordered_map<unsigned int, const nvml::ProcessUtilizationSample*> newest;
  unsigned long long seen = gpu.last_seen_us;
  for (const auto& sample : buffer) {
    seen = std::max(seen, sample.time_stamp);
    if (sample.sm_util > 100 || tree.count(static_cast<pid_t>(sample.pid)) == 0) continue;
    auto& slot = newest[sample.pid];
    if (slot == nullptr || slot->time_stamp < sample.time_stamp) slot = &sample;
  }
  gpu.last_seen_us = seen;
  unsigned int total = 0;
  for (const auto& [pid, sample] : newest) {
    total += sample->sm_util;
    GpuProcessSample& p = (*per_pid)[static_cast<pid_t>(pid)];
    p.pid = static_cast<pid_t>(pid);
    p.sm_utilization_ratio = sample->sm_util / 100.0;
  }
  // A listed process with no sample in the period ran no kernel in it.
  for (auto& [pid, p] : *per_pid) {
    if (!p.sm_utilization_ratio) p.sm_utilization_ratio = 0.0;
  }
  return std::min(total, 100u) / 100.0;
}

}  // namespace gpufeed
