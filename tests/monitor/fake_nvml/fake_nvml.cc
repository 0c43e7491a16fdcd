// A fake libnvidia-ml.so.1 for the monitor tests: serves readings from a script file named by
// $GPUFEED_FAKE_NVML_SCRIPT, read again at every nvmlInit (so each test starts afresh).
//
// Script lines (`#` starts a comment):
//   devices N                 number of GPUs (default 1)
//   init_error CODE           nvmlInit answers CODE
//   name D TEXT...            device name
//   util D V...               one value per call, the last one repeats; `na` = NOT_SUPPORTED
//   mem_util D V...   memory_used D BYTES...   memory_total D BYTES   memory_reserved D BYTES
//   power D MILLIWATTS...   temperature D C...   sm_clock D MHZ...
//   pcie_rx D KB_S...   pcie_tx D KB_S...
//   process D PID BYTES       a compute process (PID `self` = the loading process;
//                             `file:PATH` = the pid written in PATH, read at each query, left
//                             out while PATH holds none: for children started later)
//   process_util D PID SM     a process-utilization sample
//   process_race D N          the next N reads of a sized process buffer find one process
//                             more than the sizing call said (INSUFFICIENT_SIZE again)
// Built twice: with the `_v2`/`_v3` symbols, and with -DFAKE_NVML_NO_V2 as an old driver
// without them, whose v1 memory call counts reserved memory as used.
//
// The structs below restate nvml.h on purpose instead of sharing src/monitor/nvml_api.h, so a
// layout mistake there shows up as wrong values in the tests.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

typedef int nvmlReturn_t;
constexpr nvmlReturn_t SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
                       NOT_FOUND = 6, INSUFFICIENT_SIZE = 7;

struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
};

constexpr long long kNa = -1;

struct Process {
  unsigned int pid;
  unsigned long long bytes;
  std::string pid_file = {};  // when set, the pid is read from it at each query
};

struct Gpu {
  std::string name = "Fake GPU";
  std::map<std::string, std::vector<long long>> series;
  std::map<std::string, size_t> calls;
  std::vector<Process> processes;
  std::vector<Process> process_util;  // bytes = sm util
  int process_race = 0;
  unsigned long long util_time = 0;
};

std::mutex mutex;
int init_count = 0;
int init_error = 0;
std::vector<Gpu> gpus;

long long ParseValue(const std::string& token) {
  if (token == "na") return kNa;
  return std::stoll(token);
}

unsigned int ParsePid(const std::string& token) {
  if (token == "self") return static_cast<unsigned int>(getpid());
  if (token.rfind("file:", 0) == 0) return 0;  // resolved at each query
  return static_cast<unsigned int>(std::stoul(token));
}

// The scripted processes with their pids now: `file:` pids read afresh, unknown ones dropped.
std::vector<Process> Resolve(const std::vector<Process>& scripted) {
  std::vector<Process> out;
  for (Process p : scripted) {
    if (!p.pid_file.empty()) {
      std::ifstream in(p.pid_file);
      unsigned long pid = 0;
      if (!(in >> pid) || pid == 0) continue;
      p.pid = static_cast<unsigned int>(pid);
    }
    out.push_back(p);
  }
  return out;
}

void LoadScript() {
  gpus.assign(1, Gpu{});
  init_error = 0;
  const char* path = std::getenv("GPUFEED_FAKE_NVML_SCRIPT");
  if (path == nullptr) return;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "devices") {
      size_t n = 0;
      words >> n;
      gpus.assign(n, Gpu{});
      continue;
    }
    if (key == "init_error") {
      words >> init_error;
      continue;
    }
    size_t d = 0;
    words >> d;
    if (d >= gpus.size()) continue;
    Gpu& gpu = gpus[d];
    std::string token;
    if (key == "name") {
      std::getline(words >> std::ws, gpu.name);
    } else if (key == "process" || key == "process_util") {
      std::string pid, value;
      words >> pid >> value;
      (key == "process" ? gpu.processes : gpu.process_util)
          .push_back({ParsePid(pid), std::stoull(value),
                      pid.rfind("file:", 0) == 0 ? pid.substr(5) : std::string()});
    } else if (key == "process_race") {
      words >> gpu.process_race;
    } else {
      while (words >> token) gpu.series[key].push_back(ParseValue(token));
    }
  }
}

// The next value of a scripted series: one per call, the last repeats. False: not supported.
bool Next(Gpu& gpu, const std::string& key, long long* value) {
  auto it = gpu.series.find(key);
  if (it == gpu.series.end() || it->second.empty()) return false;
  size_t call = gpu.calls[key]++;
  *value = it->second[std::min(call, it->second.size() - 1)];
  return *value != kNa;
}

// Devices are handed out as 1-based indexes disguised as pointers.
Gpu* Find(void* device) {
  size_t index = reinterpret_cast<uintptr_t>(device);
  if (init_count == 0 || index == 0 || index > gpus.size()) return nullptr;
  return &gpus[index - 1];
}

nvmlReturn_t Init() {
  std::lock_guard<std::mutex> lock(mutex);
  if (init_count == 0) LoadScript();
  if (init_error != 0) return init_error;
  ++init_count;
  return SUCCESS;
}

nvmlReturn_t Count(unsigned int* count) {
  std::lock_guard<std::mutex> lock(mutex);
  if (init_count == 0) return UNINITIALIZED;
  *count = static_cast<unsigned int>(gpus.size());
  return SUCCESS;
}

nvmlReturn_t Handle(unsigned int index, void** device) {
  std::lock_guard<std::mutex> lock(mutex);
  if (init_count == 0) return UNINITIALIZED;
  if (index >= gpus.size()) return INVALID_ARGUMENT;
  *device = reinterpret_cast<void*>(uintptr_t{index} + 1);
  return SUCCESS;
}

// Memory readings: total, used (v2 meaning) and reserved.
nvmlReturn_t Memory(void* device, unsigned long long* total, unsigned long long* used,
                    unsigned long long* reserved) {
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return INVALID_ARGUMENT;
  long long t = 0, u = 0, r = 0;
  if (!Next(*gpu, "memory_total", &t) || !Next(*gpu, "memory_used", &u)) return NOT_SUPPORTED;
  if (!Next(*gpu, "memory_reserved", &r)) r = 0;
  *total = t;
  *used = u;
  *reserved = r;
  return SUCCESS;
}

template <typename Info>
nvmlReturn_t Processes(void* device, unsigned int* count, Info* infos) {
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr || count == nullptr) return INVALID_ARGUMENT;
  const std::vector<Process> processes = Resolve(gpu->processes);
  unsigned int n = static_cast<unsigned int>(processes.size());
  if (infos != nullptr && gpu->process_race > 0) {
    --gpu->process_race;  // a process started since the caller sized its buffer
    *count = n + 1;
    return INSUFFICIENT_SIZE;
  }
  if (*count < n || (infos == nullptr && n > 0)) {
    *count = n;
    return INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < n; ++i) {
    Info info{};
    info.pid = processes[i].pid;
    info.usedGpuMemory = processes[i].bytes;
    infos[i] = info;
  }
  *count = n;
  return SUCCESS;
}

}  // namespace

#ifndef FAKE_NVML_NO_V2
EXPORT nvmlReturn_t nvmlInit_v2() { return Init(); }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) { return Count(count); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** d) { return Handle(i, d); }
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void* device, nvmlMemory_v2_t* memory) {
  std::lock_guard<std::mutex> lock(mutex);
  if (memory == nullptr || memory->version != (sizeof(nvmlMemory_v2_t) | (2u << 24))) {
    return 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
  }
  unsigned long long total, used, reserved;
  nvmlReturn_t rc = Memory(device, &total, &used, &reserved);
  if (rc != SUCCESS) return rc;
  memory->total = total;
  memory->reserved = reserved;
  memory->used = used;
  memory->free = total - used - reserved;
  return SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned int* c,
                                                            nvmlProcessInfo_t* p) {
  return Processes(d, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void* d, unsigned int* c,
                                                            nvmlProcessInfo_t* p) {
  return Processes(d, c, p);
}
#endif

EXPORT nvmlReturn_t nvmlInit() { return Init(); }
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return Count(count); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, void** d) { return Handle(i, d); }

EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(mutex);
  if (init_count == 0) return UNINITIALIZED;
  --init_count;
  return SUCCESS;
}

EXPORT const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case SUCCESS:
      return "Success";
    case NOT_SUPPORTED:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return INVALID_ARGUMENT;
  if (gpu->name.size() + 1 > length) return INSUFFICIENT_SIZE;
  std::memcpy(name, gpu->name.c_str(), gpu->name.size() + 1);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* util) {
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return INVALID_ARGUMENT;
  long long g = 0, m = 0;
  bool has_gpu = Next(*gpu, "util", &g);
  bool has_memory = Next(*gpu, "mem_util", &m);
  if (!has_gpu) return NOT_SUPPORTED;
  util->gpu = static_cast<unsigned int>(g);
  util->memory = has_memory ? static_cast<unsigned int>(m) : 0;
  return SUCCESS;
}

// The v1 call: "used" includes the memory the driver reserves (drivers >= 515).
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory) {
  std::lock_guard<std::mutex> lock(mutex);
  unsigned long long total, used, reserved;
  nvmlReturn_t rc = Memory(device, &total, &used, &reserved);
  if (rc != SUCCESS) return rc;
  memory->total = total;
  memory->used = used + reserved;
  memory->free = total - used - reserved;
  return SUCCESS;
}

#define FAKE_NVML_SCALAR(symbol, key)                             \
  EXPORT nvmlReturn_t symbol(void* device, unsigned int* value) { \
    std::lock_guard<std::mutex> lock(mutex);                      \
    Gpu* gpu = Find(device);                                      \
    if (gpu == nullptr) return INVALID_ARGUMENT;                  \
    long long v = 0;                                              \
    if (!Next(*gpu, key, &v)) return NOT_SUPPORTED;               \
    *value = static_cast<unsigned int>(v);                        \
    return SUCCESS;                                               \
  }
FAKE_NVML_SCALAR(nvmlDeviceGetPowerUsage, "power")

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* value) {
  if (sensor != 0) return INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return INVALID_ARGUMENT;
  long long v = 0;
  if (!Next(*gpu, "temperature", &v)) return NOT_SUPPORTED;
  *value = static_cast<unsigned int>(v);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(void* device, int type, unsigned int* value) {
  if (type != 1) return NOT_SUPPORTED;  // only the SM clock is scripted
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return INVALID_ARGUMENT;
  long long v = 0;
  if (!Next(*gpu, "sm_clock", &v)) return NOT_SUPPORTED;
  *value = static_cast<unsigned int>(v);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(void* device, int counter, unsigned int* value) {
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return INVALID_ARGUMENT;
  long long v = 0;
  if (!Next(*gpu, counter == 1 ? "pcie_rx" : "pcie_tx", &v)) return NOT_SUPPORTED;
  *value = static_cast<unsigned int>(v);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void* d, unsigned int* c,
                                                         nvmlProcessInfo_v1_t* p) {
  return Processes(d, c, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(void* device,
                                                    nvmlProcessUtilizationSample_t* samples,
                                                    unsigned int* count,
                                                    unsigned long long last_seen) {
  std::lock_guard<std::mutex> lock(mutex);
  Gpu* gpu = Find(device);
  if (gpu == nullptr || count == nullptr) return INVALID_ARGUMENT;
  const std::vector<Process> process_util = Resolve(gpu->process_util);
  if (process_util.empty()) return NOT_FOUND;
  unsigned int n = static_cast<unsigned int>(process_util.size());
  if (samples == nullptr || *count < n) {
    *count = n;
    return INSUFFICIENT_SIZE;
  }
  // Each read is a new sample period, one second after the previous one.
  gpu->util_time += 1000000;
  if (gpu->util_time <= last_seen) return NOT_FOUND;
  for (unsigned int i = 0; i < n; ++i) {
    samples[i] = {process_util[i].pid,
                  gpu->util_time,
                  static_cast<unsigned int>(process_util[i].bytes),
                  0,
                  0,
                  0};
  }
  *count = n;
  return SUCCESS;
}
