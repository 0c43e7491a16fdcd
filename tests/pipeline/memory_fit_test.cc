// FitBuffersInMemory: batch buffers in flight sized in bytes against what the process may
// allocate, defaults lowered to fit, and a refusal that names the fields, the sizes, the limit
// found and what would fit.
#include "pipeline/memory_fit.h"

#include <gtest/gtest.h>

#include <string>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

LoaderOptions Defaults() {
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = o.max_workers = 2;
  o.prefetch = o.max_prefetch = 2;
  o.max_outstanding = 3;
  return o;
}

// An address-space limit of `limit` with `used` in use; plenty of RAM.
MemoryRoom Limited(uint64_t limit, uint64_t used) {
  MemoryRoom room;
  room.available_ram = 64 * kGiB;
  room.address_space = AddressSpace{limit, used};
  room.allocatable = limit - used;
  return room;
}

class MemoryFit : public ::testing::Test {
 protected:
  // Rows of 1 GiB of int32: one field "x".
  BufferShape Shape(int64_t rows) {
    schema_.fields = {{"x", DType::kInt32, {int64_t{1} << 28}}};
    return {static_cast<size_t>(rows) * kGiB, kGiB, rows, &schema_, true};
  }
  std::string Refusal(LoaderOptions o, const ChosenCounts& chosen, const BufferShape& shape,
                      const MemoryRoom& room) {
    try {
      FitBuffersInMemory(o, chosen, shape, room);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    ADD_FAILURE() << "not refused";
    return {};
  }
  Schema schema_;
};

TEST_F(MemoryFit, SmallBatchesAreLeftAsAsked) {
  LoaderOptions o = Defaults();
  schema_.fields = {{"x", DType::kFloat32, {1024}}};
  FitBuffersInMemory(o, {}, {4 << 20, 4096, 1024, &schema_, true}, Limited(8 * kGiB, kGiB));
  EXPECT_EQ(o.workers, 2);
  EXPECT_EQ(o.prefetch, 2);
  EXPECT_EQ(o.max_outstanding, 3);
}

TEST_F(MemoryFit, DefaultsAreLoweredUntilTheBuffersAndACopyFit) {
  // 7 GiB left, less the margin (256 MiB + 7/16 GiB): room for 6 buffers of 1 GiB. Asked:
  // 2 + 2 + 3 + the caller's copy = 8; prefetch 1 gives 7; one worker gives 6.
  LoaderOptions o = Defaults();
  FitBuffersInMemory(o, {}, Shape(1), Limited(8 * kGiB, kGiB));
  EXPECT_EQ(o.workers, 1);
  EXPECT_EQ(o.max_workers, 1);
  EXPECT_EQ(o.prefetch, 1);
  EXPECT_EQ(o.max_prefetch, 1);
  EXPECT_EQ(o.max_outstanding, 3);
  EXPECT_LE((1 + 1 + 3 + 1) * kGiB, 7 * kGiB - MemoryMargin(7 * kGiB));
}

TEST_F(MemoryFit, WhatTheCallerSetIsNotLoweredButNamedInTheRefusal) {
  LoaderOptions o = Defaults();
  o.workers = o.max_workers = 4;
  const std::string why = Refusal(o, {true, true}, Shape(1), Limited(8 * kGiB, kGiB));
  EXPECT_NE(why.find("fewer buffers in flight fit: workers=1, prefetch=1"), std::string::npos)
      << why;
}

TEST_F(MemoryFit, ABatchTooLargeIsRefusedNamingFieldSizesLimitAndABatchThatFits) {
  const std::string why = Refusal(Defaults(), {}, Shape(13), Limited(8 * kGiB, kGiB));
  for (const char* part : {"a batch of 13 samples", "x: int32[268435456]", "a sample", "RLIMIT_AS",
                           "in use", "held by the consumer",
                           "batch_size=1 fits, with workers=1, prefetch=1, max_outstanding=2"}) {
    EXPECT_NE(why.find(part), std::string::npos) << part << " in: " << why;
  }
}

TEST_F(MemoryFit, OneSampleThatCannotFitIsSaidSo) {
  const std::string why = Refusal(Defaults(), {}, Shape(1), Limited(4 * kGiB, kGiB));
  EXPECT_NE(why.find("one sample alone does not fit"), std::string::npos) << why;
  EXPECT_NE(why.find("fields=[...]"), std::string::npos) << why;
}

TEST_F(MemoryFit, UnknownRoomChecksNothing) {
  LoaderOptions o = Defaults();
  FitBuffersInMemory(o, {}, Shape(100), MemoryRoom{});
  EXPECT_EQ(o.workers, 2);
}

TEST(MemoryRoomTest, TheProcesssOwnLimitIsRead) {
  const MemoryRoom room = MemoryRoom::Now();
  EXPECT_GT(room.available_ram, 0u);
  // The tests run without `ulimit -v` unless a caller set one; either way the figure is sane.
  if (room.address_space) {
    EXPECT_GT(room.address_space->used, 0u);
    EXPECT_LE(room.allocatable, room.address_space->left());
  }
}

}  // namespace
}  // namespace gpufeed
