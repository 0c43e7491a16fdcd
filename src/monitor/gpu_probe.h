// GpuProbe: one GpuSample per NVML device per call.
//
// Opening NVML never fails the caller: without a library (or when nvmlInit fails) the
// probe has no devices and status() says why, once. Each reading the driver answers
// NOT_SUPPORTED (or any other error, or a symbol the library lacks) is left empty. Process
// figures count only the watched tree's pids, in total and per process; process lists are sized
// with a first call and re-asked while the driver answers INSUFFICIENT_SIZE (processes start
// between the calls). Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "gpufeed/monitor_types.h"
#include "monitor/nvml_library.h"

namespace gpufeed {

class GpuProbe {
 public:
  explicit GpuProbe(const std::string& library_path);
  ~GpuProbe();

  bool available() const { return library_ != nullptr; }
  // "NVML: 2 GPUs (libnvidia-ml.so.1)" or "GPU fields n/a: cannot load ...".
  const std::string& status() const { return status_; }

  std::vector<GpuSample> Sample(const std::unordered_set<pid_t>& tree);

 private:
  struct Gpu {
    int index = 0;
    nvml::Device handle = nullptr;
    std::string name;
    unsigned long long last_seen_us = 0;  // newest process-utilization sample seen
  };
  // The tree's totals; each also fills its figure of every tree member it finds into
  // `per_pid`.
  std::optional<uint64_t> TreeMemory(const Gpu& gpu, const std::unordered_set<pid_t>& tree,
                                     std::map<pid_t, GpuProcessSample>* per_pid);
  std::optional<double> TreeSmUtilization(Gpu& gpu, const std::unordered_set<pid_t>& tree,
                                          std::map<pid_t, GpuProcessSample>* per_pid);

  std::unique_ptr<NvmlLibrary> library_;
  std::vector<Gpu> gpus_;
  std::string status_;
};

}  // namespace gpufeed
