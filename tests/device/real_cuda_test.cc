// Batches on a real GPU, read back and checked value by value: the loader's copies, the
// device cache tier's gather kernel, and the consumer-stream timing events. Skipped unless
// GPUFEED_TEST_REAL_CUDA=1 (scripts/gpu-check sets it on a machine with a GPU).
//
// The batches are read back with cuMemcpyDtoH_v2, loaded here from the driver on its own
// (the product never copies to the host), so a wrong copy cannot hide behind the code under
// test. The driver is the one GPUFEED_CUDA_LIBRARY names, else libcuda.so.1: with the fake
// driver named there, scripts/gpu-check --fake rehearses these tests without a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/device.h"
#include "gpufeed/loader.h"
#include "gpufeed/open_loader.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

constexpr uint64_t kSeed = 11;

bool RealCudaAsked() {
  const char* value = std::getenv("GPUFEED_TEST_REAL_CUDA");
  return value != nullptr && std::string(value) == "1";
}

// cuMemcpyDtoH_v2 and the primary context of device 0, from the driver itself.
class Readback {
 public:
  Readback() {
    const char* path = std::getenv("GPUFEED_CUDA_LIBRARY");
    handle_ = dlopen(path != nullptr && *path != '\0' ? path : "libcuda.so.1", RTLD_NOW);
    if (handle_ == nullptr) return;
    copy_ = reinterpret_cast<CopyFn>(dlsym(handle_, "cuMemcpyDtoH_v2"));
    retain_ = reinterpret_cast<RetainFn>(dlsym(handle_, "cuDevicePrimaryCtxRetain"));
    set_current_ = reinterpret_cast<SetCurrentFn>(dlsym(handle_, "cuCtxSetCurrent"));
    get_device_ = reinterpret_cast<GetDeviceFn>(dlsym(handle_, "cuDeviceGet"));
  }
  ~Readback() {
    if (handle_ != nullptr) dlclose(handle_);
  }

  bool ok() const { return copy_ && retain_ && set_current_ && get_device_; }

  // Copies `bytes` at device address `src` into a host vector (the calling thread's current
  // context set to device 0's primary context first).
  std::vector<std::byte> Read(const void* src, size_t bytes) {
    int device = 0;
    void* context = nullptr;
    EXPECT_EQ(get_device_(&device, 0), 0);
    EXPECT_EQ(retain_(&context, device), 0);
    EXPECT_EQ(set_current_(context), 0);
    std::vector<std::byte> out(bytes);
    EXPECT_EQ(copy_(out.data(), reinterpret_cast<unsigned long long>(src), bytes), 0);
    return out;
  }

 private:
  using CopyFn = int (*)(void*, unsigned long long, size_t);
  using RetainFn = int (*)(void**, int);
  using SetCurrentFn = int (*)(void*);
  using GetDeviceFn = int (*)(int*, int);
  void* handle_ = nullptr;
  CopyFn copy_ = nullptr;
  RetainFn retain_ = nullptr;
  SetCurrentFn set_current_ = nullptr;
  GetDeviceFn get_device_ = nullptr;
};

class RealCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RealCudaAsked()) GTEST_SKIP() << "set GPUFEED_TEST_REAL_CUDA=1 on a machine with a GPU";
    ASSERT_TRUE(readback_.ok()) << "the CUDA driver lacks cuMemcpyDtoH_v2 or is not found";
  }

  // Every value of every field of `batch` read back from the GPU equals the synthetic
  // source's value for the batch's sample indices.
  void ExpectIntact(const Batch& batch) {
    for (int f = 0; f < static_cast<int>(batch.schema().fields.size()); ++f) {
      const FieldView view = batch.field(f);
      ASSERT_EQ(view.device.type, DeviceType::kCuda);
      const std::vector<std::byte> host = readback_.Read(view.data, view.bytes());
      const int64_t per_sample = view.spec->ElementsPerSample();
      for (int64_t r = 0; r < batch.size(); ++r) {
        const int64_t sample = batch.indices()[static_cast<size_t>(r)];
        for (int64_t e = 0; e < per_sample; ++e) {
          const size_t i = static_cast<size_t>(r * per_sample + e);
          double got = 0;
          if (view.spec->dtype == DType::kFloat32) {
            float v;
            std::memcpy(&v, host.data() + i * sizeof(float), sizeof v);
            got = v;
          } else {
            int64_t v;
            std::memcpy(&v, host.data() + i * sizeof(int64_t), sizeof v);
            got = static_cast<double>(v);
          }
          ASSERT_EQ(got, SyntheticValue(kSeed, f, sample, e, view.spec->dtype))
              << "field " << f << ", batch " << batch.index() << ", row " << r;
        }
      }
    }
  }

  Readback readback_;
};

TEST_F(RealCudaTest, StreamedBatchesArriveIntactOnTheGpu) {
  auto source = OpenSynthetic(ParseSchema("x:float32[1,16,8],label:int64"), 20000, kSeed);
  LoaderOptions options;
  options.batch_size = 1000;
  options.seed = 3;
  options.device = OpenDevice("cuda");
  Loader loader(source, options);
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.SetEpoch(epoch);
    int batches = 0;
    while (auto batch = loader.Next()) {
      batch->Synchronize();
      ExpectIntact(*batch);
      ++batches;
    }
    EXPECT_EQ(batches, 20);
  }
}

TEST_F(RealCudaTest, DeviceCacheTierGathersIntactRowsOnTheGpu) {
  LoaderRecipe recipe;
  recipe.source = OpenSynthetic(ParseSchema("x:float32[32],label:int64"), 10000, kSeed);
  recipe.loader.batch_size = 512;
  recipe.loader.seed = 5;
  recipe.device = "cuda";
  recipe.cache.tier = CacheTier::kDevice;
  auto [loader, cached, info] = OpenLoader(recipe);
  EXPECT_EQ(info.tier, CacheTier::kDevice) << info.ToString();
  int batches = 0;
  while (auto batch = loader->Next()) {
    batch->Synchronize();
    ExpectIntact(*batch);
    ++batches;
  }
  EXPECT_EQ(batches, 20);
}

TEST_F(RealCudaTest, TimingEventsOnTheDefaultStreamMeasureEverySteppedBatch) {
  auto source = OpenSynthetic(ParseSchema("x:float32[256]"), 64 * 40, kSeed);
  LoaderOptions options;
  options.batch_size = 64;
  options.device = OpenDevice("cuda");
  Loader loader(source, options);
  int64_t batches = 0;
  while (auto batch = loader.Next()) {
    batch->WaitOn(0);
    ++batches;
  }
  loader.Next();  // the next epoch's first batch harvests the last step's events
  const LoaderStats stats = loader.stats();
  EXPECT_EQ(batches, 40);
  // Events are harvested once complete, without blocking the loop: the last few steps may
  // still be pending, most must be measured.
  EXPECT_GE(stats.gpu_steps, batches / 2) << stats.ToJson();
  EXPECT_GE(stats.GpuBusyFraction(), 0.0) << stats.ToJson();
}

}  // namespace
}  // namespace gpufeed
