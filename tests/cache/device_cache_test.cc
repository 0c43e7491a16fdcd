// The device cache tier on the fake CUDA driver, whose streams run copies and the gather
// kernel's host twin late and in order: every value of several shuffled epochs equals the
// source's, the budget decides between device and shm and an explicit "device" over budget
// names both sizes, running out of device or pinned memory during the upload leaves nothing
// allocated, random transforms refuse the tier while deterministic ones run before the
// upload, and dropping a loader mid-epoch leaks nothing.
#include "cache/device_cache.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>

#include "cache/cache_test_util.h"
#include "device/cuda_device.h"
#include "device/fake_cuda_fixture.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

// Row sizes that take each of the kernel's words: 32 bytes (16-byte words), 24 (4-byte), 3
// (bytes) and 8 (int64 labels: 4-byte words).
Schema TestSchema() { return ParseSchema("y:float32[8],x:float32[6],b:uint8[3],label:int64"); }

// The rows `indices` of `source`, field by field, read on the host.
std::vector<std::vector<std::byte>> HostRows(const Source& source,
                                             std::span<const int64_t> indices) {
  auto state = source.NewWorkerState();
  return testing::ReadRows(source, {indices.begin(), indices.end()}, state.get());
}

// True when every byte of every field equals what `reference` reads for the batch's
// indices. Reads device memory directly: the fake's is host memory.
bool Matches(const Batch& batch, const Source& reference) {
  const auto expected = HostRows(reference, batch.indices());
  for (size_t f = 0; f < expected.size(); ++f) {
    const FieldView view = batch.field(static_cast<int>(f));
    if (view.bytes() != expected[f].size()) return false;
    if (std::memcmp(view.data, expected[f].data(), view.bytes()) != 0) return false;
  }
  return true;
}

class DeviceCacheTest : public testing::FakeCudaTest {
 protected:
  void SetUp() override {
    FakeCudaTest::SetUp();
    device_ = cuda::OpenCudaDevice();
    base_ = OpenSynthetic(TestSchema(), 1000, 11);
  }
  void TearDown() override {
    base_.reset();
    device_.reset();
    EXPECT_EQ(fake_cuda_live_modules(), 0);
    FakeCudaTest::TearDown();
  }

  CacheOptions Options(const std::string& tier) {
    CacheOptions o;
    o.tier = ParseCacheTier(tier);
    o.device = device_;
    o.verbose = false;
    o.shm_dir = shm_dir_.path();
    o.threads = 2;
    o.measure_gather = false;  // "auto" here is about the device tier, whatever the speeds
    o.background = false;
    return o;
  }

  LoaderOptions LoaderOpts(int64_t batch_size = 64) {
    LoaderOptions o;
    o.batch_size = batch_size;
    o.seed = 5;
    o.workers = 3;
    o.device = device_;
    return o;
  }

  testing::ScratchDir shm_dir_;
  std::shared_ptr<cuda::CudaDevice> device_;
  std::shared_ptr<Source> base_;
};

TEST_F(DeviceCacheTest, EverySampleOfSeveralEpochsEqualsTheSource) {
  fake_cuda_set_copy_delay_us(100);  // copies and kernels complete late
  CacheInfo info;
  auto cached = OpenCached(base_, Options("device"), &info);
  EXPECT_EQ(info.tier, CacheTier::kDevice);
  EXPECT_THAT(info.reason, HasSubstr("fits the device budget"));
  ASSERT_NE(cached->device_rows(), nullptr);
  EXPECT_EQ(cached->cache_tier(), CacheTier::kDevice);  // what the doctor's advice goes by
  const int64_t launches_before = fake_cuda_launches_completed();
  {
    Loader loader(cached, LoaderOpts(64));
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::multiset<int64_t> seen;
      while (auto batch = loader.Next()) {
        batch->Synchronize();
        ASSERT_TRUE(Matches(*batch, *base_)) << "epoch " << epoch << " batch " << batch->index();
        seen.insert(batch->indices().begin(), batch->indices().end());
      }
      ASSERT_EQ(seen.size(), 1000u);
      EXPECT_EQ(*seen.begin(), 0);
      EXPECT_EQ(*seen.rbegin(), 999);
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 1000u);
    }
    const LoaderStats stats = loader.stats();
    EXPECT_EQ(stats.read_ns, 0);  // no worker read a host buffer
    EXPECT_GT(stats.copy_ns, 0);  // issuing the gathers is the copy stage
    for (const BatchTiming& t : loader.RecentBatches(16)) EXPECT_GT(t.copy_ns, 0);
  }
  // One gather per field and batch: 4 fields x 16 batches x 3 epochs (at least: workers
  // run ahead into the next epoch).
  EXPECT_GE(fake_cuda_launches_completed() - launches_before, 4 * 16 * 3);
  EXPECT_GE(device_->stats().gathers, 4 * 16 * 3);
}

TEST_F(DeviceCacheTest, AutoFallsToShmOverTheDeviceBudgetAndExplicitDeviceSaysWhy) {
  const uint64_t bytes = TestSchema().SampleBytes() * 1000;  // 67,000
  CacheOptions o = Options("auto");
  o.device_budget_bytes = bytes - 1;
  CacheInfo info;
  auto cached = OpenCached(base_, o, &info);
  EXPECT_EQ(info.tier, CacheTier::kShm);
  EXPECT_THAT(info.reason, HasSubstr("exceeds the device budget"));
  EXPECT_EQ(cached->device_rows(), nullptr);
  o.tier = CacheTier::kDevice;
  try {
    OpenCached(base_, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(),
                HasSubstr(fmt::format("({} bytes > {} bytes) on cuda:0", bytes, bytes - 1)));
    EXPECT_THAT(e.what(), HasSubstr("device_budget_bytes"));
  }
  o.device_budget_bytes = bytes;
  EXPECT_NE(OpenCached(base_, o)->device_rows(), nullptr);
  // The default budget: 40% of free device memory (1 GiB on the fake) fits 67 KB.
  o.tier = CacheTier::kAuto;
  o.device_budget_bytes = 0;
  OpenCached(base_, o, &info);
  EXPECT_EQ(info.tier, CacheTier::kDevice);
}

TEST_F(DeviceCacheTest, OutOfDeviceMemoryDuringTheUploadIsAnErrorAndLeaksNothing) {
  // Room for the first field's array but not the rest: the shared copy is one block of all
  // four arrays, each 256-byte aligned (32000 + 24000 + 3000 + 8000 rounded up: 67328 bytes).
  fake_cuda_set_device_memory(32 * 1000 + 100);
  CacheOptions o = Options("device");
  o.device_budget_bytes = 1 << 20;  // the budget is not what stops it here
  try {
    OpenCached(base_, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"));
    EXPECT_THAT(e.what(), HasSubstr("67328 byte"));
  }
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

TEST_F(DeviceCacheTest, FailuresMidUploadLeakNothing) {
  fake_cuda_set_copy_delay_us(50);
  CacheOptions o = Options("device");
  // Pinned staging cannot be had.
  fake_cuda_set_pinned_limit(1000);
  EXPECT_THROW(OpenCached(base_, o), Error);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  // Pinned memory for one lane's first staging buffer (~4 KB) but not its second, or for
  // one lane but not the next: whichever allocation fails, nothing stays allocated.
  for (const uint64_t limit : {3000, 5000, 7000, 9000, 11000, 13000, 17000}) {
    SCOPED_TRACE(limit);
    fake_cuda_set_pinned_limit(limit);
    try {
      DeviceCachedSource::Upload(base_, device_, {},
                                 {.threads = 2, .verbose = false, .chunk_bytes = 4096});
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDevice);
    }
    EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  }
  fake_cuda_set_pinned_limit(0);
  // A copy fails on its stream after several were queued.
  fake_cuda_fail_copy(3, 700, 1);
  DeviceUploadOptions upload{.threads = 2, .verbose = false, .chunk_bytes = 4096};
  try {
    DeviceCachedSource::Upload(base_, device_, {}, upload);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
  }
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
  // The base source failing mid-upload.
  auto failing = std::make_shared<testing::InstrumentedSource>(base_);
  failing->fail = true;
  EXPECT_THROW(DeviceCachedSource::Upload(failing, device_, {}, upload), Error);
  EXPECT_EQ(fake_cuda_outstanding_allocations(), 0);
}

TEST_F(DeviceCacheTest, RandomTransformsRefuseTheDeviceTier) {
  base_ = OpenSynthetic(ParseSchema("mel:float32[1,8,4],label:int64"), 200, 3);
  CacheOptions o = Options("device");
  o.transforms = {SpecAugment("mel")};
  try {
    OpenCached(base_, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("is random"));
  }
  o.tier = CacheTier::kAuto;
  CacheInfo info;
  OpenCached(base_, o, &info);
  EXPECT_EQ(info.tier, CacheTier::kShm);
  EXPECT_THAT(info.reason, HasSubstr("not the device tier: the transform specaugment"));
  ASSERT_EQ(info.loader_transforms.size(), 1u);  // the loader still runs it
}

TEST_F(DeviceCacheTest, DeterministicTransformsRunBeforeTheUpload) {
  fake_cuda_set_copy_delay_us(20);
  base_ = OpenSynthetic(ParseSchema("mel:float32[1,8,4],label:int64"), 300, 3);
  CacheOptions o = Options("device");
  o.transforms = {Normalize("mel", 0.5f, 2.0f), Cast("mel", DType::kFloat16)};
  CacheInfo info;
  // The budget counts the uploaded float16 rows (300 x (64 + 8) bytes), not the float32 ones.
  o.device_budget_bytes = 300 * (64 + 8);
  auto cached = OpenCached(base_, o, &info);
  EXPECT_EQ(info.tier, CacheTier::kDevice);
  EXPECT_TRUE(info.loader_transforms.empty());
  EXPECT_EQ(cached->schema().fields[0].dtype, DType::kFloat16);
  // The host path of the cached source transforms the same way; the reference for it is a
  // host loader over the base source running the transforms itself.
  LoaderOptions host_options = LoaderOpts(50);
  host_options.device = HostDevice();
  host_options.shuffle = false;
  host_options.transforms = o.transforms;
  Loader host(base_, host_options);
  LoaderOptions device_options = LoaderOpts(50);
  device_options.shuffle = false;
  Loader gathered(cached, device_options);
  while (auto want = host.Next()) {
    auto got = gathered.Next();
    ASSERT_NE(got, nullptr);
    got->Synchronize();
    for (int f = 0; f < 2; ++f) {
      ASSERT_EQ(got->field(f).bytes(), want->field(f).bytes());
      ASSERT_EQ(std::memcmp(got->field(f).data, want->field(f).data, want->field(f).bytes()), 0);
    }
    ASSERT_TRUE(Matches(*got, *cached));
  }
  // Host transforms on a loader over device-resident rows cannot run: a clear error.
  device_options.transforms = {Cast("mel", DType::kFloat32)};
  try {
    Loader refused(cached, device_options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("run on the host"));
  }
}

TEST_F(DeviceCacheTest, ALoaderOnAnotherDeviceReadsTheSameSamplesOnTheHost) {
  auto cached = OpenCached(base_, Options("device"));
  LoaderOptions o = LoaderOpts(100);
  o.device = HostDevice();
  Loader loader(cached, o);
  int batches = 0;
  while (auto batch = loader.Next()) {
    ASSERT_TRUE(Matches(*batch, *base_));
    ++batches;
  }
  EXPECT_EQ(batches, 10);
  EXPECT_EQ(device_->stats().gathers, 0);
}

TEST_F(DeviceCacheTest, AnotherDeviceObjectOfTheSameGpuGathersThere) {
  auto cached = OpenCached(base_, Options("device"));
  // A second handle on cuda:0 (the same primary context): the rows are on its device too.
  std::shared_ptr<cuda::CudaDevice> same_gpu = cuda::OpenCudaDevice();
  LoaderOptions o = LoaderOpts(100);
  o.device = same_gpu;
  {
    Loader loader(cached, o);
    int batches = 0;
    while (auto batch = loader.Next()) {
      batch->Synchronize();
      ASSERT_TRUE(Matches(*batch, *base_));
      ++batches;
    }
    EXPECT_EQ(batches, 10);
    EXPECT_EQ(loader.stats().read_ns, 0);  // gathered, not read on the host
  }
  EXPECT_GE(same_gpu->stats().gathers, 10);
}

TEST_F(DeviceCacheTest, KernelsTheDriverCannotLoadStopTheDeviceTierBeforeTheUpload) {
  fake_cuda_set_module_load_result(222);  // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
  try {
    OpenCached(base_, Options("device"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_UNSUPPORTED_PTX_VERSION"));
  }
  EXPECT_EQ(fake_cuda_device_bytes_in_use(), 0u);  // nothing was uploaded
  // Under auto the next tier serves, and the reason says what the device tier hit.
  CacheInfo info;
  auto cached = OpenCached(base_, Options("auto"), &info);
  EXPECT_NE(info.tier, CacheTier::kDevice);
  EXPECT_THAT(info.reason, HasSubstr("the device tier failed"));
  EXPECT_THAT(info.reason, HasSubstr("UNSUPPORTED_PTX_VERSION"));
  EXPECT_EQ(cached->device_rows(), nullptr);
  Loader loader(cached, LoaderOpts(100));
  while (auto batch = loader.Next()) {
    batch->Synchronize();
    ASSERT_TRUE(Matches(*batch, *base_));
  }
}

TEST_F(DeviceCacheTest, AutoFallsBackWhenTheUploadRunsOutOfDeviceMemory) {
  // The budget says it fits; the device disagrees (another process took the memory).
  fake_cuda_set_device_memory(32 * 1000 + 100);
  CacheOptions o = Options("auto");
  o.device_budget_bytes = 1 << 20;
  CacheInfo info;
  auto cached = OpenCached(base_, o, &info);
  EXPECT_NE(info.tier, CacheTier::kDevice);
  EXPECT_THAT(info.reason, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_EQ(fake_cuda_device_bytes_in_use(), 0u);
}

TEST_F(DeviceCacheTest, TheConsumerStreamRunsOnlyAfterTheBatchsGathers) {
  auto cached = OpenCached(base_, Options("device"));
  fake_cuda_set_copy_delay_us(20'000);  // gathers still queued when Next() returns
  const cuda::CudaDriver& driver = device_->driver();
  cuda::CUstream consumer = nullptr;
  {
    cuda::CurrentContextScope scope(*device_->context());
    ASSERT_EQ(driver.StreamCreate(&consumer, cuda::kStreamNonBlocking), cuda::kSuccess);
  }
  {
    Loader loader(cached, LoaderOpts(100));
    int unordered = -1;
    for (int i = 0; i < 6; ++i) {
      auto batch = loader.Next();
      ASSERT_NE(batch, nullptr);
      const FieldView y = batch->field("y");
      // Control: the default stream, which did not wait, sees the gather still pending.
      if (i == 0) {
        ASSERT_EQ(fake_cuda_stream_probe(nullptr, y.data, y.bytes(), &unordered), 0);
      }
      batch->WaitOn(reinterpret_cast<uintptr_t>(consumer));
      int ordered = -1;
      ASSERT_EQ(fake_cuda_stream_probe(consumer, y.data, y.bytes(), &ordered), 0);
      ASSERT_EQ(driver.StreamSynchronize(consumer), cuda::kSuccess);
      EXPECT_EQ(ordered, 0) << "batch " << i << " read on the consumer stream before its gather";
      EXPECT_TRUE(Matches(*batch, *base_));
    }
    driver.StreamSynchronize(nullptr);
    EXPECT_GT(unordered, 0);
  }
  cuda::CurrentContextScope scope(*device_->context());
  EXPECT_EQ(driver.StreamDestroy(consumer), cuda::kSuccess);
}

TEST_F(DeviceCacheTest, DroppingTheLoaderMidEpochLeaksNothing) {
  fake_cuda_set_copy_delay_us(300);
  auto cached = OpenCached(base_, Options("device"));
  std::unique_ptr<Batch> kept;
  {
    Loader loader(cached, LoaderOpts(32));
    auto first = loader.Next();
    kept = loader.Next();
    ASSERT_NE(kept, nullptr);
  }  // gathers still queued on the stream
  kept->Synchronize();
  EXPECT_TRUE(Matches(*kept, *base_));
  kept.reset();
  cached.reset();
  fake_cuda_synchronize_all();
  EXPECT_EQ(fake_cuda_live_streams(), 0);
}

}  // namespace
}  // namespace gpufeed
