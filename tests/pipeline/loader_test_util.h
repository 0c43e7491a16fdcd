// Helpers of the loader's tests: a data set whose values name their sample, a source that
// delays or fails, default options, and the checked labels of a batch or an epoch.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace gpufeed::loader_test {

// x[i][e] = i * 10 + e.
struct Data {
  std::vector<int64_t> label;
  std::vector<float> x;
  explicit Data(int64_t n) : label(static_cast<size_t>(n)), x(static_cast<size_t>(n * 4)) {
    for (int64_t i = 0; i < n; ++i) {
      label[static_cast<size_t>(i)] = i;
      for (int e = 0; e < 4; ++e)
        x[static_cast<size_t>(i * 4 + e)] = static_cast<float>(i * 10 + e);
    }
  }
  std::shared_ptr<Source> Open() const {
    return OpenMemory(
        {{ParseSchema("x:float32[4]").fields[0], x.data(), static_cast<int64_t>(label.size())},
         {ParseSchema("label:int64").fields[0], label.data(), static_cast<int64_t>(label.size())}});
  }
};

// Wraps a source: sleeps in every Read, and fails on one sample.
class TestSource : public Source {
 public:
  TestSource(std::shared_ptr<Source> base, int64_t fail_at = -1, int delay_ms = 0)
      : base_(std::move(base)), fail_at_(fail_at), delay_ms_(delay_ms) {}
  const Schema& schema() const override { return base_->schema(); }
  int64_t size() const override { return base_->size(); }
  std::string Describe() const override { return "test"; }
  std::string Identity() const override { return "test"; }
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    ++reads;
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    for (int64_t i : indices) {
      if (i == fail_at_) {
        throw Error(ErrorCode::kIo, "test.bin: read failed at sample " + std::to_string(i));
      }
    }
    base_->Read(indices, out, state);
  }
  mutable std::atomic<int> reads{0};

 private:
  std::shared_ptr<Source> base_;
  int64_t fail_at_;
  int delay_ms_;
};

inline LoaderOptions Opts(int64_t batch, int workers = 2) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.rank = 0;
  o.world_size = 1;
  o.seed = 1;
  return o;
}

// Checks a batch's rows against the data and returns the labels in row order.
inline std::vector<int64_t> CheckedLabels(const Batch& batch) {
  const auto x = batch.field("x");
  const auto label = batch.field("label");
  std::vector<int64_t> out;
  for (int64_t r = 0; r < batch.size(); ++r) {
    const int64_t i = label.as<int64_t>()[r];
    EXPECT_EQ(i, batch.indices()[static_cast<size_t>(r)]);
    for (int e = 0; e < 4; ++e) EXPECT_EQ(x.as<float>()[r * 4 + e], static_cast<float>(i * 10 + e));
    out.push_back(i);
  }
  return out;
}

inline std::vector<std::vector<int64_t>> Epoch(Loader& loader) {
  std::vector<std::vector<int64_t>> batches;
  while (auto batch = loader.Next()) batches.push_back(CheckedLabels(*batch));
  return batches;
}

}  // namespace gpufeed::loader_test
