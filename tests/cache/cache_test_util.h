// Helpers for the cache tests: a base-source decorator that counts reads, can slow them and
// can fail them; reading a whole source; comparing two sources sample by sample.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cache/shm/shm_user_dir.h"
#include "gpufeed/error.h"
#include "gpufeed/source.h"

namespace gpufeed::testing {

// The cache files in the user's folder under the shm root `dir` (without the user's secret),
// sorted.
inline std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(ShmUserDirPath(dir))) {
    if (e.path().filename() != "secret") names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class InstrumentedSource : public Source {
 public:
  explicit InstrumentedSource(std::shared_ptr<Source> base) : base_(std::move(base)) {}
  const Schema& schema() const override { return base_->schema(); }
  int64_t size() const override { return base_->size(); }
  std::string Describe() const override { return "instrumented " + base_->Describe(); }
  std::string Identity() const override { return base_->Identity(); }
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    if (fail.load()) throw Error(ErrorCode::kIo, "injected read failure");
    reads.fetch_add(1);
    samples_read.fetch_add(static_cast<int64_t>(indices.size()));
    base_->Read(indices, out, state);
  }

  int64_t delay_us = 0;
  std::atomic<bool> fail{false};
  mutable std::atomic<int64_t> reads{0};
  mutable std::atomic<int64_t> samples_read{0};

 private:
  std::shared_ptr<Source> base_;
};

// Every sample of `source`, field by field, read in batches of `batch` in index order.
inline std::vector<std::vector<std::byte>> ReadAll(const Source& source, int64_t batch = 97) {
  const Schema& schema = source.schema();
  std::vector<std::vector<std::byte>> fields(schema.fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    fields[f].resize(schema.fields[f].SampleBytes() * static_cast<size_t>(source.size()));
  }
  auto state = source.NewWorkerState();
  for (int64_t begin = 0; begin < source.size(); begin += batch) {
    const int64_t rows = std::min(batch, source.size() - begin);
    std::vector<int64_t> indices(static_cast<size_t>(rows));
    std::iota(indices.begin(), indices.end(), begin);
    BatchView view;
    view.rows = rows;
    for (size_t f = 0; f < fields.size(); ++f) {
      view.fields.push_back(fields[f].data() + schema.fields[f].SampleBytes() * begin);
    }
    source.Read(indices, view, state.get());
  }
  return fields;
}

// Reads `indices` (any order, repeats allowed) from `source` into per-field buffers.
inline std::vector<std::vector<std::byte>> ReadRows(const Source& source,
                                                    const std::vector<int64_t>& indices,
                                                    SourceWorkerState* state = nullptr) {
  const Schema& schema = source.schema();
  std::vector<std::vector<std::byte>> fields(schema.fields.size());
  BatchView view;
  view.rows = static_cast<int64_t>(indices.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    fields[f].resize(schema.fields[f].SampleBytes() * indices.size());
    view.fields.push_back(fields[f].data());
  }
  source.Read(indices, view, state);
  return fields;
}

}  // namespace gpufeed::testing
