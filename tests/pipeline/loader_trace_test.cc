// The loader's stage trace: Chrome trace-event JSON with a track per worker (read, transform,
// copy spans per batch with batch number and sample count), the consumer's track (waits in
// Next(), steps) and counters; bounded; written on request and when the loader ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "gpufeed/transforms.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);  // throws (fails the test) when not JSON
}

std::shared_ptr<Source> Synthetic(int64_t n) {
  return OpenSynthetic(ParseSchema("x:float32[16]"), n);
}

int64_t RunEpoch(Loader& loader) {
  int64_t batches = 0;
  while (auto b = loader.Next()) ++batches;
  return batches;
}

TEST(LoaderTraceTest, TraceHasWorkerTracksConsumerWaitsAndCounters) {
  testing::ScratchDir dir;
  LoaderOptions o;
  o.batch_size = 50;
  o.workers = 2;
  o.transforms = {Normalize("x", 0.5f, 2.0f)};
  Loader loader(Synthetic(1020), o);
  ASSERT_EQ(RunEpoch(loader), 21);
  const std::string path = dir.Path("trace.json");
  loader.WriteTrace(path);
  const nlohmann::json trace = ReadJson(path);

  std::map<int, std::string> threads;
  std::map<std::string, std::map<int64_t, nlohmann::json>> spans;  // name -> batch -> event
  std::map<std::string, int> counters;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "thread_name") {
      threads[e.at("tid")] = e.at("args").at("name");
    } else if (ph == "X") {
      spans[e.at("name")][e.at("args").at("batch")] = e;
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    } else if (ph == "C") {
      ++counters[e.at("name")];
    }
  }
  EXPECT_EQ(threads.at(0), "consumer (Next)");
  std::set<std::string> worker_names;
  for (const auto& [tid, name] : threads) {
    if (tid != 0) worker_names.insert(name);
  }
  EXPECT_THAT(worker_names, ::testing::IsSubsetOf({"worker 0", "worker 1"}));
  EXPECT_FALSE(worker_names.empty());
  for (const char* name : {"read", "transform", "wait in Next()"}) {
    ASSERT_EQ(spans[name].size(), 21u) << name;
    for (int64_t b = 0; b < 21; ++b) {
      const auto& e = spans[name].at(b);
      EXPECT_EQ(e.at("args").at("samples"), b < 20 ? 50 : 20) << name << " batch " << b;
      EXPECT_EQ(e.at("args").at("epoch"), 0);
      // Worker stages on a worker's track, the wait on the consumer's.
      EXPECT_EQ(e.at("tid").get<int>() == 0, std::string(name) == "wait in Next()") << name;
    }
  }
  // A batch's transform follows its read on the same track.
  for (int64_t b = 0; b < 21; ++b) {
    const auto& read = spans["read"].at(b);
    const auto& transform = spans["transform"].at(b);
    EXPECT_EQ(read.at("tid"), transform.at("tid"));
    EXPECT_GE(transform.at("ts").get<double>() + 1e-3,
              read.at("ts").get<double>() + read.at("dur").get<double>());
  }
  EXPECT_EQ(spans["step"].size(), 20u);  // between consecutive Next() calls
  EXPECT_EQ(counters["queue depth"], 21);
  EXPECT_EQ(counters["buffers free"], 21);
  EXPECT_EQ(counters["workers active"], 21);
}

TEST(LoaderTraceTest, TraceOptionWritesTheFileWhenTheLoaderEnds) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("end.json");
  {
    LoaderOptions o;
    o.batch_size = 100;
    o.workers = 1;
    o.trace = path;
    Loader loader(Synthetic(1000), o);
    RunEpoch(loader);
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  int reads = 0;
  const nlohmann::json trace = ReadJson(path);
  for (const auto& e : trace.at("traceEvents")) reads += e.at("name") == "read";
  EXPECT_EQ(reads, 10);
}

TEST(LoaderTraceTest, RingKeepsTheLastBatches) {
  testing::ScratchDir dir;
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 2;
  o.trace_batches = 5;
  Loader loader(Synthetic(200), o);
  RunEpoch(loader);
  loader.WriteTrace(dir.Path("ring.json"));
  std::set<int64_t> batches;
  const nlohmann::json trace = ReadJson(dir.Path("ring.json"));
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("name") == "read") batches.insert(e.at("args").at("batch").get<int64_t>());
  }
  EXPECT_EQ(batches, (std::set<int64_t>{15, 16, 17, 18, 19}));
}

TEST(LoaderTraceTest, RecordingOffRefusesToWriteAndBadValuesAreRefused) {
  LoaderOptions o;
  o.batch_size = 10;
  o.trace_batches = -1;
  Loader loader(Synthetic(100), o);
  std::string message;
  EXPECT_EQ(testing::ErrorCodeOf([&] { loader.WriteTrace("/tmp/unused.json"); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, ::testing::HasSubstr("trace_batches = -1"));
  o.trace_batches = -2;
  EXPECT_EQ(testing::ErrorCodeOf([&] { Loader bad(Synthetic(100), o); }),
            ErrorCode::kInvalidArgument);
}

TEST(LoaderTraceTest, UnwritablePathIsAnIoErrorNamingIt) {
  LoaderOptions o;
  o.batch_size = 10;
  Loader loader(Synthetic(100), o);
  RunEpoch(loader);
  std::string message;
  EXPECT_EQ(testing::ErrorCodeOf([&] { loader.WriteTrace("/nonexistent-dir/t.json"); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, ::testing::HasSubstr("/nonexistent-dir/t.json"));
}

}  // namespace
}  // namespace gpufeed
