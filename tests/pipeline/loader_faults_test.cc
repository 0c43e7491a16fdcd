// Faults injected under a running loader through the file seam: the loader must surface
// them as clear errors (EIO) or hide them correctly (short reads, slow disks).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "core/io/fault_file.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class LoaderFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpufeed_loader_faults_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::vector<float> x(kSamples * 3);
    std::vector<int64_t> label(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) {
      label[static_cast<size_t>(i)] = i;
      for (int e = 0; e < 3; ++e) x[static_cast<size_t>(i * 3 + e)] = static_cast<float>(i + e);
    }
    WriteNpy((dir_ / "x.npy").string(), ParseSchema("x:float32[3]").fields[0], kSamples, x.data());
    WriteNpy((dir_ / "label.npy").string(), ParseSchema("label:int64").fields[0], kSamples,
             label.data());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::shared_ptr<Source> Open(std::shared_ptr<FaultInjectingFileSystem> faults) {
    NumpyOptions o;
    o.fields = {"x", "label"};
    o.file_system = std::move(faults);
    return OpenNumpy(dir_.string(), o);
  }

  static LoaderOptions Opts() {
    LoaderOptions o;
    o.batch_size = 50;
    o.workers = 2;
    o.rank = 0;
    o.world_size = 1;
    return o;
  }

  static constexpr int64_t kSamples = 2000;
  fs::path dir_;
};

TEST_F(LoaderFaults, EioMidEpochIsRaisedNamingFileAndSample) {
  auto faults = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem());
  auto source = Open(faults);
  FaultInjectingFileSystem::Rules rules;
  rules.eio_after_reads = faults->reads() + 300;  // well into the first epoch
  faults->SetRules(rules);
  Loader loader(source, Opts());
  int delivered = 0;
  try {
    while (loader.Next()) ++delivered;
    FAIL() << "EIO was swallowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr(dir_.string()));
    EXPECT_THAT(e.what(), HasSubstr("sample"));
  }
  EXPECT_LT(delivered, 40);
}

TEST_F(LoaderFaults, ShortReadsAndSlowReadsStillDeliverExactData) {
  FaultInjectingFileSystem::Rules rules;
  rules.max_bytes_per_read = 5;  // every read comes back in pieces
  rules.delay_us = 5;
  auto faults = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem(), rules);
  Loader loader(Open(faults), Opts());
  std::set<int64_t> seen;
  while (auto batch = loader.Next()) {
    const auto x = batch->field("x");
    const auto label = batch->field("label");
    for (int64_t r = 0; r < batch->size(); ++r) {
      const int64_t i = label.as<int64_t>()[r];
      EXPECT_EQ(x.as<float>()[r * 3 + 2], static_cast<float>(i + 2));
      seen.insert(i);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kSamples));
}

}  // namespace
}  // namespace gpufeed
