#include "pipeline/batch_builder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "pipeline/batch_parts.h"

namespace gpufeed {
namespace {

// label[i] = i, x[i][e] = i * 10 + e.
struct Data {
  std::vector<int64_t> label;
  std::vector<float> x;
  explicit Data(int64_t n) : label(static_cast<size_t>(n)), x(static_cast<size_t>(n * 2)) {
    for (int64_t i = 0; i < n; ++i) {
      label[static_cast<size_t>(i)] = i;
      for (int e = 0; e < 2; ++e)
        x[static_cast<size_t>(i * 2 + e)] = static_cast<float>(i * 10 + e);
    }
  }
  std::shared_ptr<Source> Open() const {
    const auto n = static_cast<int64_t>(label.size());
    return OpenMemory({{ParseSchema("x:float32[2]").fields[0], x.data(), n},
                       {ParseSchema("label:int64").fields[0], label.data(), n}});
  }
};

// An event that is done only once waited for (or told so).
class FakeEvent : public DeviceEvent {
 public:
  explicit FakeEvent(bool done) : done_(done) {}
  bool IsDone() override { return done_; }
  void Wait() override {
    waited_ = true;
    done_ = true;
  }
  void MakeStreamWait(uintptr_t) override {}
  std::atomic<bool> done_;
  std::atomic<bool> waited_{false};
};

// Copies with memcpy; its second copy fails when told to, and the event recorded after a
// failure stays pending until someone waits for it.
class FlakyStream : public DeviceStream {
 public:
  explicit FlakyStream(std::vector<std::shared_ptr<FakeEvent>>* events, bool* fail)
      : events_(events), fail_(fail) {}
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (*fail_ && ++copies_ == 2) {
      failed_ = true;
      throw Error(ErrorCode::kDevice, "copy failed");
    }
    std::memcpy(dst, src, bytes);
  }
  void GatherRows(std::span<const GatherField>, std::span<const int64_t>) override {}
  std::shared_ptr<DeviceEvent> Record() override {
    auto event = std::make_shared<FakeEvent>(!failed_);
    events_->push_back(event);
    return event;
  }
  void Synchronize() override {}

 private:
  std::vector<std::shared_ptr<FakeEvent>>* events_;
  bool* fail_;
  int copies_ = 0;
  bool failed_ = false;
};

// Host memory, but batches go through staging buffers and a copy stream like on a GPU.
class StagingDevice : public Device {
 public:
  DeviceType type() const override { return DeviceType::kCpu; }
  int ordinal() const override { return 0; }
  std::string name() const override { return "staging"; }
  bool needs_copy() const override { return true; }
  void* AllocHost(size_t n) override { return HostDevice()->AllocHost(n); }
  void FreeHost(void* p) noexcept override { HostDevice()->FreeHost(p); }
  void* AllocDevice(size_t n) override { return HostDevice()->AllocDevice(n); }
  void FreeDevice(void* p) noexcept override { HostDevice()->FreeDevice(p); }
  std::unique_ptr<DeviceStream> NewStream() override {
    return std::make_unique<FlakyStream>(&events, &fail);
  }
  std::shared_ptr<DeviceEvent> RecordOn(uintptr_t) override { return nullptr; }
  DeviceMemoryInfo MemoryInfo() override { return HostDevice()->MemoryInfo(); }

  std::vector<std::shared_ptr<FakeEvent>> events;  // every event recorded, in order
  bool fail = false;
};

const std::function<bool()> kNeverStop = [] { return false; };

BatchBuilder::Capacity Small() {
  BatchBuilder::Capacity c;
  c.workers = 2;
  c.batch_buffers = 2;
  c.reserve_batches = 1;
  c.staging_buffers = 1;
  c.reserve_staging = 1;
  return c;
}

void ExpectRows(const Batch& batch, const std::vector<int64_t>& rows) {
  ASSERT_EQ(batch.size(), static_cast<int64_t>(rows.size()));
  EXPECT_EQ(std::vector<int64_t>(batch.indices().begin(), batch.indices().end()), rows);
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(batch.field("label").as<int64_t>()[r], rows[r]);
    EXPECT_EQ(batch.field("x").as<float>()[r * 2 + 1], static_cast<float>(rows[r] * 10 + 1));
  }
}

TEST(BatchBuilder, BuildsHostBatchesInIndexOrderAndCountsThemHeld) {
  Data data(50);
  BatchBuilder builder(data.Open(), HostDevice(), {}, 1, 8);
  builder.Prepare(Small());
  EXPECT_EQ(builder.buffers(), 2);  // no staging on the host
  EXPECT_EQ(builder.buffers_allocated(), 1);
  const std::vector<int64_t> rows = {7, 3, 41, 0};
  BuiltBatch built = builder.Build(2, 5, rows, 1, kNeverStop);
  ASSERT_TRUE(built.buffer);
  EXPECT_EQ(built.event, nullptr);
  EXPECT_EQ(built.timing.rows, 4);
  EXPECT_EQ(built.timing.batch, 5);
  EXPECT_GT(built.ready_ns, 0);
  auto held = std::make_shared<std::atomic<int>>(0);
  auto batch = builder.MakeBatch(std::move(built), held, nullptr, -1);
  EXPECT_EQ(*held, 1);
  EXPECT_EQ(batch->epoch(), 2);
  EXPECT_EQ(batch->index(), 5);
  ExpectRows(*batch, rows);
  batch.reset();
  EXPECT_EQ(*held, 0);
}

TEST(BatchBuilder, StagedBatchesCarryTheCopysEvent) {
  Data data(50);
  auto device = std::make_shared<StagingDevice>();
  BatchBuilder builder(data.Open(), device, {}, 1, 8);
  builder.Prepare(Small());
  EXPECT_EQ(builder.buffers(), 3);
  const std::vector<int64_t> rows = {9, 8, 1};
  BuiltBatch built = builder.Build(0, 0, rows, 0, kNeverStop);
  ASSERT_TRUE(built.buffer);
  ASSERT_NE(built.event, nullptr);
  EXPECT_EQ(built.event, device->events.back());
  auto batch =
      builder.MakeBatch(std::move(built), std::make_shared<std::atomic<int>>(0), nullptr, -1);
  ExpectRows(*batch, rows);
}

TEST(BatchBuilder, AStopWhileWaitingForABufferBuildsNothing) {
  Data data(50);
  BatchBuilder builder(data.Open(), HostDevice(), {}, 1, 8);
  BatchBuilder::Capacity c = Small();
  c.batch_buffers = 1;
  builder.Prepare(c);
  BuiltBatch first = builder.Build(0, 0, std::vector<int64_t>{1}, 0, kNeverStop);
  ASSERT_TRUE(first.buffer);
  BuiltBatch second = builder.Build(0, 1, std::vector<int64_t>{2}, 1, [] { return true; });
  EXPECT_FALSE(second.buffer);
}

// A copy that fails half way may still have read the staging buffer: the buffer must come
// back only after the stream passes the failure point, so the next batch's wait for a
// staging buffer waits for that event first.
TEST(BatchBuilder, AFailedCopyHoldsItsStagingBufferUntilTheStreamPassesIt) {
  Data data(50);
  auto device = std::make_shared<StagingDevice>();
  BatchBuilder builder(data.Open(), device, {}, 1, 8);
  builder.Prepare(Small());  // one staging buffer
  device->fail = true;
  EXPECT_THROW(builder.Build(0, 0, std::vector<int64_t>{1, 2}, 0, kNeverStop), Error);
  ASSERT_EQ(device->events.size(), 1u);
  const std::shared_ptr<FakeEvent> after_failure = device->events[0];
  EXPECT_FALSE(after_failure->waited_);
  device->fail = false;
  BuiltBatch next = builder.Build(0, 1, std::vector<int64_t>{3}, 0, kNeverStop);
  EXPECT_TRUE(after_failure->waited_);
  ASSERT_TRUE(next.buffer);
}

}  // namespace
}  // namespace gpufeed
