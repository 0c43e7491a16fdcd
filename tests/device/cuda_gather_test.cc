// DeviceStream::GatherRows on the CUDA backend, through the fake driver whose launches run
// the kernels' host twins on the stream thread: each word size moves the right rows, in
// stream order after late copies; the fake checks launches as a driver does (parameter
// buffer size, unknown kernel name); the host device's memcpy twin agrees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "device/cuda_device.h"
#include "device/kernels/gather_ptx.h"
#include "fake_cuda_fixture.h"
#include "gpufeed/error.h"

namespace gpufeed::cuda {
namespace {

using ::testing::HasSubstr;

class CudaGatherTest : public testing::FakeCudaTest {
 protected:
  void SetUp() override {
    FakeCudaTest::SetUp();
    device_ = OpenCudaDevice();
  }
  void TearDown() override {
    device_.reset();
    FakeCudaTest::TearDown();
  }

  // Gathers `rows` rows of `row_bytes` from a table of 50 rows whose bytes are distinct per
  // position, with the table and output at `offset` bytes past an allocation's start.
  void CheckGather(size_t row_bytes, size_t offset, const std::vector<int64_t>& rows) {
    const size_t table_bytes = 50 * row_bytes;
    std::vector<std::byte> table(table_bytes);
    for (size_t i = 0; i < table_bytes; ++i) table[i] = static_cast<std::byte>(i * 7 + i / 251);
    auto* pinned = static_cast<std::byte*>(device_->AllocHost(table_bytes));
    auto* src = static_cast<std::byte*>(device_->AllocDevice(table_bytes + offset));
    auto* dst = static_cast<std::byte*>(device_->AllocDevice(rows.size() * row_bytes + offset));
    std::memcpy(pinned, table.data(), table_bytes);
    {
      auto stream = device_->NewStream();
      stream->CopyToDevice(src + offset, pinned, table_bytes);  // late: the gather must wait
      stream->GatherRows(dst + offset, src + offset, row_bytes, rows);
      stream->Synchronize();
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(std::memcmp(dst + offset + i * row_bytes,
                            table.data() + static_cast<size_t>(rows[i]) * row_bytes, row_bytes),
                0)
          << "row " << i << " of " << row_bytes << " bytes at offset " << offset;
    }
    device_->FreeHost(pinned);
    device_->FreeDevice(src);
    device_->FreeDevice(dst);
  }

  std::shared_ptr<CudaDevice> device_;
};

TEST_F(CudaGatherTest, EveryWordSizeGathersTheRowsInStreamOrder) {
  fake_cuda_set_copy_delay_us(2000);
  const std::vector<int64_t> rows = {49, 0, 7, 7, 13, 48, 1};
  const int64_t launches = fake_cuda_launches_completed();
  CheckGather(32, 0, rows);  // 16-byte words
  CheckGather(24, 0, rows);  // 4-byte words (24 is not a multiple of 16)
  CheckGather(32, 4, rows);  // 4-byte words: the addresses are not 16-byte aligned
  CheckGather(3, 0, rows);   // bytes
  CheckGather(64, 1, rows);  // bytes: the addresses are odd
  EXPECT_EQ(fake_cuda_launches_completed() - launches, 5);
  EXPECT_EQ(device_->stats().gathers, 5);
}

TEST_F(CudaGatherTest, ManyGathersReuseTheIndexBuffersSafely) {
  fake_cuda_set_copy_delay_us(200);
  constexpr size_t kRow = 16;
  auto* src = static_cast<std::byte*>(device_->AllocDevice(100 * kRow));
  auto* dst = static_cast<std::byte*>(device_->AllocDevice(20 * 100 * kRow));
  auto* pinned = static_cast<std::byte*>(device_->AllocHost(100 * kRow));
  for (size_t i = 0; i < 100 * kRow; ++i) pinned[i] = static_cast<std::byte>(i / kRow);
  {
    auto stream = device_->NewStream();
    stream->CopyToDevice(src, pinned, 100 * kRow);
    std::vector<int64_t> rows(100);
    for (int g = 0; g < 20; ++g) {
      // The same host vector, rewritten at once: the stream must have its own copy.
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>((i + g) % 100);
      stream->GatherRows(dst + g * 100 * kRow, src, kRow, rows);
    }
    stream->Synchronize();
  }
  for (int g = 0; g < 20; ++g) {
    for (size_t i = 0; i < 100; ++i) {
      ASSERT_EQ(dst[(g * 100 + i) * kRow], static_cast<std::byte>((i + g) % 100));
    }
  }
  device_->FreeHost(pinned);
  device_->FreeDevice(src);
  device_->FreeDevice(dst);
}

TEST_F(CudaGatherTest, AllFieldsOfABatchShareOneCopyOfTheIndices) {
  fake_cuda_set_copy_delay_us(500);
  auto* a = static_cast<int32_t*>(device_->AllocDevice(10 * 4 * sizeof(int32_t)));
  auto* b = static_cast<uint8_t*>(device_->AllocDevice(10 * 3));
  auto* out_a = static_cast<int32_t*>(device_->AllocDevice(3 * 4 * sizeof(int32_t)));
  auto* out_b = static_cast<uint8_t*>(device_->AllocDevice(3 * 3));
  for (int i = 0; i < 40; ++i) a[i] = i;  // the fake's device memory is host memory
  for (int i = 0; i < 30; ++i) b[i] = static_cast<uint8_t>(100 + i);
  const std::vector<int64_t> rows = {9, 2, 5};
  const GatherField fields[] = {{out_a, a, 4 * sizeof(int32_t)}, {out_b, b, 3}};
  const int64_t copies = fake_cuda_copies_completed();
  const int64_t launches = fake_cuda_launches_completed();
  {
    auto stream = device_->NewStream();
    stream->GatherRows(fields, rows);
    stream->Synchronize();
  }
  EXPECT_EQ(fake_cuda_copies_completed() - copies, 1);
  EXPECT_EQ(fake_cuda_launches_completed() - launches, 2);
  EXPECT_EQ(std::vector<int32_t>(out_a, out_a + 12),
            (std::vector<int32_t>{36, 37, 38, 39, 8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(std::vector<uint8_t>(out_b, out_b + 9),
            (std::vector<uint8_t>{127, 128, 129, 106, 107, 108, 115, 116, 117}));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(out_a),
                  static_cast<void*>(out_b)}) {
    device_->FreeDevice(p);
  }
}

TEST_F(CudaGatherTest, AnOutOfRangeRowIsAStickyIllegalAddress) {
  auto* src = static_cast<std::byte*>(device_->AllocDevice(10 * 8));
  auto* dst = static_cast<std::byte*>(device_->AllocDevice(2 * 8));
  {
    auto stream = device_->NewStream();
    const std::vector<int64_t> rows = {1, 1000000};
    stream->GatherRows(dst, src, 8, rows);
    try {
      stream->Synchronize();
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
    }
  }
  expected_failures_ = 1;  // the fake records the bad access
  device_->FreeDevice(src);
  device_->FreeDevice(dst);
}

TEST_F(CudaGatherTest, ARowPastItsArrayIsCaughtEvenWhereAnotherAllocationFollows) {
  // Row 10 of a 10-row array lands wherever the allocator put the next block; the fake
  // judges it against src's own allocation, not "some live allocation".
  auto* src = static_cast<std::byte*>(device_->AllocDevice(10 * 8));
  auto* next = static_cast<std::byte*>(device_->AllocDevice(1 << 16));
  auto* dst = static_cast<std::byte*>(device_->AllocDevice(2 * 8));
  {
    auto stream = device_->NewStream();
    const std::vector<int64_t> rows = {9, 10};
    stream->GatherRows(dst, src, 8, rows);
    EXPECT_THROW(stream->Synchronize(), Error);
  }
  expected_failures_ = 1;
  for (void* p : {static_cast<void*>(src), static_cast<void*>(next), static_cast<void*>(dst)}) {
    device_->FreeDevice(p);
  }
}

TEST_F(CudaGatherTest, TheFakeChecksLaunchesAsADriverDoes) {
  const CudaDriver& driver = device_->driver();
  CurrentContextScope scope(*device_->context());
  CUmodule module = nullptr;
  ASSERT_EQ(driver.ModuleLoadData(&module, kGatherPtx), kSuccess);
  CUfunction function = nullptr;
  EXPECT_EQ(driver.ModuleGetFunction(&function, module, "gpufeed_no_such_kernel"), kErrorNotFound);
  ASSERT_EQ(driver.ModuleGetFunction(&function, module, kGatherKernel16), kSuccess);
  auto* dst = static_cast<std::byte*>(device_->AllocDevice(64));
  const auto address = reinterpret_cast<uint64_t>(dst);
  uint64_t params[5] = {address, address, 1, address, 0};
  size_t size = 32;  // one parameter short
  void* extra[] = {kLaunchParamBufferPointer, params, kLaunchParamBufferSize, &size,
                   kLaunchParamEnd};
  EXPECT_EQ(driver.LaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra),
            kErrorInvalidValue);
  size = 40;
  void* kernel_params[5] = {&params[0], &params[1], &params[2], &params[3], &params[4]};
  // Both ways of passing parameters at once, a block too large, an empty grid.
  EXPECT_EQ(driver.LaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, kernel_params, extra),
            kErrorInvalidValue);
  EXPECT_EQ(driver.LaunchKernel(function, 1, 1, 1, 2048, 1, 1, 0, nullptr, nullptr, extra),
            kErrorInvalidValue);
  EXPECT_EQ(driver.LaunchKernel(function, 0, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra),
            kErrorInvalidValue);
  // count = 0: a valid launch that moves nothing, by either way of passing parameters.
  EXPECT_EQ(driver.LaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra), kSuccess);
  EXPECT_EQ(driver.LaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, kernel_params, nullptr),
            kSuccess);
  EXPECT_EQ(driver.StreamSynchronize(nullptr), kSuccess);
  EXPECT_EQ(driver.ModuleUnload(module), kSuccess);
  expected_failures_ = 1;  // the short parameter buffer
  device_->FreeDevice(dst);
}

TEST(HostGather, CopiesTheRowsInOrder) {
  auto device = HostDevice();
  std::vector<int32_t> table(30);
  std::iota(table.begin(), table.end(), 100);
  std::vector<int32_t> out(4 * 3, -1);
  const std::vector<int64_t> rows = {9, 0, 4, 4};
  device->NewStream()->GatherRows(out.data(), table.data(), 3 * sizeof(int32_t), rows);
  EXPECT_EQ(out,
            (std::vector<int32_t>{127, 128, 129, 100, 101, 102, 112, 113, 114, 112, 113, 114}));
}

}  // namespace
}  // namespace gpufeed::cuda
