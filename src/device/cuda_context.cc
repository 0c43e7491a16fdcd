#include "device/cuda_context.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "device/kernels/gather_ptx.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

std::atomic<bool> forked_child{false};
std::atomic<pid_t> parent_pid{0};

}  // namespace

bool InForkedChild() { return forked_child.load(std::memory_order_relaxed); }

void WatchForFork() {
  static std::once_flag once;
  std::call_once(once, [] {
    parent_pid = getpid();
    pthread_atfork(nullptr, nullptr, [] { forked_child.store(true); });
  });
}

void CheckNotForked(std::string_view what) {
  if (!InForkedChild()) return;
  throw Error(ErrorCode::kDevice,
              fmt::format("{}: this process was forked from {} after the CUDA driver was loaded, "
                          "and CUDA does not survive fork; start workers with the 'spawn' "
                          "method, or open the device only in the child",
                          what, parent_pid.load()));
}

std::shared_ptr<CudaContext> CudaContext::RetainPrimary(const CudaDriver& driver, int ordinal) {
  const std::string name = DeviceId::Cuda(ordinal).ToString();
  CUdevice device = 0;
  driver.Check(driver.DeviceGet(&device, ordinal), name + ": cuDeviceGet");
  CUcontext context = nullptr;
  // Never cuCtxCreate: a context of our own would not share memory or streams with PyTorch.
  driver.Check(driver.DevicePrimaryCtxRetain(&context, device),
               name + ": cuDevicePrimaryCtxRetain");
  return std::shared_ptr<CudaContext>(new CudaContext(driver, device, context, ordinal));
}

CudaContext::CudaContext(const CudaDriver& driver, CUdevice device, CUcontext context, int ordinal)
    : driver_(driver),
      device_(device),
      context_(context),
      ordinal_(ordinal),
      name_(DeviceId::Cuda(ordinal).ToString()) {}

CudaContext::~CudaContext() {
  if (module_ != nullptr && !InForkedChild()) {
    try {
      CurrentContextScope scope(*this);
      driver_.ModuleUnload(module_);
    } catch (...) {
    }
  }
  // Exactly one release per retain; never a reset, which would free PyTorch's memory too.
  // At process exit the driver may already be deinitialized: nothing left to release then.
  if (!InForkedChild()) driver_.DevicePrimaryCtxRelease(device_);
}

void CudaContext::Check(CUresult result, std::string_view what) const {
  if (result == kSuccess) return;
  throw Error(ErrorCode::kDevice, fmt::format("{}: {}: {}", name_, what, driver_.Describe(result)));
}

const GatherKernels& CudaContext::gather_kernels() const {
  std::lock_guard lock(module_mu_);
  if (module_ != nullptr) return gather_;
  CUmodule module = nullptr;
  Check(driver_.ModuleLoadData(&module, kGatherPtx), "cuModuleLoadData (the gather kernels)");
  GatherKernels kernels;
  const auto get = [&](CUfunction* out, const char* name) {
    const CUresult result = driver_.ModuleGetFunction(out, module, name);
    if (result != kSuccess) {
      driver_.ModuleUnload(module);
      Check(result, fmt::format("cuModuleGetFunction({})", name));
    }
  };
  get(&kernels.words16, kGatherKernel16);
  get(&kernels.words4, kGatherKernel4);
  get(&kernels.words1, kGatherKernel1);
  gather_ = kernels;
  module_ = module;
  return gather_;
}

CurrentContextScope::CurrentContextScope(const CudaContext& context) : driver_(context.driver()) {
  CheckNotForked(context.name());
  CUcontext current = nullptr;
  if (driver_.CtxGetCurrent(&current) != kSuccess) current = nullptr;
  if (current == context.handle()) return;
  context.Check(driver_.CtxSetCurrent(context.handle()), "cuCtxSetCurrent");
  previous_ = current;
  restore_ = true;
}

CurrentContextScope::~CurrentContextScope() {
  if (restore_) driver_.CtxSetCurrent(previous_);
}

}  // namespace gpufeed::cuda
