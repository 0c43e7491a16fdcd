// CudaContext: one device's primary context, retained for as long as anything gpufeed made
// on the device (the device, a stream, an event, a buffer pool) still lives; every such RAII
// owner holds a shared_ptr to it. The primary context is the one the CUDA runtime (hence
// PyTorch) uses, so batches and the consumer's tensors share pointers and streams.
//
// The current context is per thread: CurrentContextScope makes ours current for one driver
// call on any thread (workers, the consumer, a thread dropping the last batch) and puts back
// whatever that thread had, so a framework's idea of its current device never changes.
//
// The gather kernels (kernels/gather.cu) are loaded into the context once, on first use, and
// unloaded with it.
//
// Thread-safety: CudaContext is thread-safe (immutable but for the kernels, loaded once). A
// CurrentContextScope belongs to the thread that made it.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "device/cuda_driver.h"

namespace gpufeed::cuda {

// True in a child forked after the driver was loaded: CUDA's state does not survive fork, so
// every driver call there is undefined. Set by a pthread_atfork handler.
bool InForkedChild();
// Registers that handler (once; the driver table does it when it loads).
void WatchForFork();
// Throws Error(kDevice) explaining the fork when InForkedChild().
void CheckNotForked(std::string_view what);

// The device tier's gather kernels, by the word each copies.
struct GatherKernels {
  CUfunction words16 = nullptr;
  CUfunction words4 = nullptr;
  CUfunction words1 = nullptr;
};

class CudaContext {
 public:
  // Retains the primary context of device `ordinal`. REQUIRES: cuInit succeeded and the
  // ordinal exists. Throws Error(kDevice) when the driver refuses.
  static std::shared_ptr<CudaContext> RetainPrimary(const CudaDriver& driver, int ordinal);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const CudaDriver& driver() const { return driver_; }
  CUcontext handle() const { return context_; }
  CUdevice device() const { return device_; }
  int ordinal() const { return ordinal_; }
  // "cuda:0"
  const std::string& name() const { return name_; }
  // Throws Error(kDevice, "<name>: <what>: <the driver's error>") unless result is kSuccess.
  void Check(CUresult result, std::string_view what) const;
  // Loads the gather PTX into this context on the first call (cuModuleLoadData: the driver
  // JIT-compiles it for the GPU). REQUIRES: this context is current. Throws Error(kDevice)
  // when the driver refuses; a later call tries again.
  const GatherKernels& gather_kernels() const;

 private:
  CudaContext(const CudaDriver& driver, CUdevice device, CUcontext context, int ordinal);

  const CudaDriver& driver_;
  const CUdevice device_;
  const CUcontext context_;
  const int ordinal_;
  const std::string name_;
  mutable std::mutex module_mu_;
  mutable CUmodule module_ = nullptr;  // guarded by module_mu_; set once
  mutable GatherKernels gather_;       // written once, before module_ is set
};

class CurrentContextScope {
 public:
  // Throws Error(kDevice) when the context cannot be made current.
  explicit CurrentContextScope(const CudaContext& context);
  ~CurrentContextScope();
  CurrentContextScope(const CurrentContextScope&) = delete;
  CurrentContextScope& operator=(const CurrentContextScope&) = delete;

 private:
  const CudaDriver& driver_;
  CUcontext previous_ = nullptr;
  bool restore_ = false;
};

}  // namespace gpufeed::cuda
