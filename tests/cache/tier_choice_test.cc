#include "cache/tier_choice.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

constexpr uint64_t kGB = 1000000000;

TierInputs Inputs(uint64_t bytes) {
  TierInputs in;
  in.bytes = bytes;
  in.ram_budget = 10 * kGB;
  in.shm_free = 20 * kGB;
  return in;
}

TEST(TierChoiceTest, AutoPicksShmWhenTheDataSetFitsTheRamBudget) {
  const TierChoice c = ChooseTier(Inputs(800000000));
  EXPECT_EQ(c.tier, CacheTier::kShm);
  EXPECT_EQ(c.reason, "800 MB fits the RAM budget 10.0 GB");
}

TEST(TierChoiceTest, AutoStreamsWhenTheDataSetExceedsTheRamBudget) {
  const TierChoice c = ChooseTier(Inputs(11 * kGB));
  EXPECT_EQ(c.tier, CacheTier::kNone);
  EXPECT_NE(c.reason.find("11.0 GB exceeds the RAM budget 10.0 GB"), std::string::npos) << c.reason;
}

TEST(TierChoiceTest, AutoUsesRamWhenSharedMemoryIsShort) {
  TierInputs in = Inputs(2 * kGB);
  in.shm_free = kGB;
  const TierChoice c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kRam);
  EXPECT_NE(c.reason.find("only 1.0 GB free"), std::string::npos) << c.reason;
}

TEST(TierChoiceTest, AutoLeavesInMemorySourcesAlone) {
  TierInputs in = Inputs(kGB);
  in.shareable = false;
  EXPECT_EQ(ChooseTier(in).tier, CacheTier::kNone);
}

TEST(TierChoiceTest, AutoOnCudaPicksTheDeviceWhenTheDataSetFits) {
  TierInputs in = Inputs(kGB);
  in.cuda = true;
  in.device_budget = 4 * kGB;
  const TierChoice c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kDevice);
  EXPECT_EQ(c.reason, "1.0 GB fits the device budget 4.0 GB");
}

TEST(TierChoiceTest, AutoOnCudaFallsToShmSayingWhy) {
  TierInputs in = Inputs(5 * kGB);
  in.cuda = true;
  in.device_budget = 4 * kGB;
  TierChoice c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kShm);
  EXPECT_EQ(c.reason,
            "5.0 GB exceeds the device budget 4.0 GB; 5.0 GB fits the RAM budget 10.0 GB");
  in = Inputs(kGB);
  in.cuda = true;
  in.device_budget = 4 * kGB;
  in.device_refusal = "the transform specaugment(mel) is random";
  c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kShm);
  EXPECT_NE(c.reason.find("not the device tier: the transform specaugment(mel) is random; "),
            std::string::npos)
      << c.reason;
}

TEST(TierChoiceTest, ExplicitDeviceNamesBytesAndBudgetOrTheRefusal) {
  TierInputs in = Inputs(5 * kGB);
  in.requested = CacheTier::kDevice;
  in.cuda = true;
  in.device_name = "cuda:0";
  in.device_budget = 4 * kGB;
  const auto message = [&] {
    try {
      ChooseTier(in);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message().find("5.0 GB exceeds the device budget 4.0 GB (5000000000 bytes > "
                           "4000000000 bytes) on cuda:0"),
            std::string::npos)
      << message();
  in.bytes = kGB;
  EXPECT_EQ(ChooseTier(in).tier, CacheTier::kDevice);
  in.device_refusal = "the transform specaugment(mel) is random";
  EXPECT_NE(message().find("specaugment(mel) is random"), std::string::npos) << message();
  in.device_refusal.clear();
  in.cuda = false;
  in.device_name = "cpu";
  EXPECT_NE(message().find("the loader's device is cpu"), std::string::npos) << message();
}

TEST(TierChoiceTest, ExplicitTiersOverBudgetOrUnknownAreErrors) {
  TierInputs in = Inputs(11 * kGB);
  for (const char* tier : {"ram", "shm"}) {
    in.requested = ParseCacheTier(tier);
    try {
      ChooseTier(in);
      FAIL() << tier;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("exceeds the RAM budget"), std::string::npos);
    }
  }
  in = Inputs(kGB);
  // An unknown tier has no CacheTier: its name is refused where text becomes one.
  EXPECT_THROW(ParseCacheTier("tape"), Error);
  in.requested = CacheTier::kShm;
  in.shareable = false;
  EXPECT_THROW(ChooseTier(in), Error);
  in.requested = CacheTier::kNone;
  EXPECT_EQ(ChooseTier(in).tier, CacheTier::kNone);
}

}  // namespace
}  // namespace gpufeed

namespace gpufeed {
namespace {

TierInputs Measured(double source, double ram, double shm) {
  TierInputs in = Inputs(800000000);
  in.measured = GatherRates{source, ram, shm};
  return in;
}

TEST(TierChoiceTest, AutoTakesShmWhenItGathersNearRamSpeed) {
  const TierChoice c = ChooseTier(Measured(1e9, 10e9, 9e9));
  EXPECT_EQ(c.tier, CacheTier::kShm);
  EXPECT_NE(c.reason.find("a shared copy gathers faster than the source, at 90% of a RAM copy's "
                          "rate (measured: source 1.0 GB/s, RAM copy 10.0 GB/s, shm copy "
                          "9.0 GB/s): one copy for every process of the node"),
            std::string::npos)
      << c.reason;
}

TEST(TierChoiceTest, AutoGivesASingleProcessRamWhereShmStillMeasuresSlower) {
  const TierChoice c = ChooseTier(Measured(1e9, 10e9, 5e9));
  EXPECT_EQ(c.tier, CacheTier::kRam);
  EXPECT_NE(c.reason.find("RAM, not shm: a shared copy gathers at 50% of RAM's rate here (below "
                          "80%) and this is the node's only process"),
            std::string::npos)
      << c.reason;
  // Several local processes: one shared copy serves them all.
  TierInputs in = Measured(1e9, 10e9, 5e9);
  in.local_processes = 4;
  const TierChoice shared = ChooseTier(in);
  EXPECT_EQ(shared.tier, CacheTier::kShm);
  EXPECT_NE(shared.reason.find("one copy for the node's 4 local processes"), std::string::npos)
      << shared.reason;
}

TEST(TierChoiceTest, AutoTakesRamWhenOnlyRamBeatsTheSource) {
  TierInputs in = Measured(4e9, 10e9, 4.2e9);  // shm within 10% of the source
  in.local_processes = 8;
  const TierChoice c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kRam);
  EXPECT_NE(c.reason.find("RAM, not shm: a shared copy gathers no faster than the source"),
            std::string::npos)
      << c.reason;
}

TEST(TierChoiceTest, AutoTakesAPublishedShmCacheWhateverTheMeasurementOrBudget) {
  TierInputs in = Measured(10e9, 10.5e9, 3e9);
  in.shm_published = true;
  in.bytes = 11 * kGB;  // over the RAM budget: its memory is spent already
  const TierChoice c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kShm);
  EXPECT_NE(c.reason.find("shared-memory cache (11.0 GB) is already built"), std::string::npos)
      << c.reason;
  in.requested = CacheTier::kNone;
  EXPECT_EQ(ChooseTier(in).tier, CacheTier::kNone);  // off is off
}

TEST(TierChoiceTest, AutoStreamsWhenNoCopyIsMeasuredFaster) {
  const TierChoice c = ChooseTier(Measured(10e9, 10.5e9, 3e9));
  EXPECT_EQ(c.tier, CacheTier::kNone);
  EXPECT_NE(c.reason.find("a copy would gather no faster"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("streaming from the source"), std::string::npos) << c.reason;
}

TEST(TierChoiceTest, AutoMeasuredStillHonoursTheBudgets) {
  TierInputs in = Measured(1e9, 10e9, 5e9);
  in.bytes = 11 * kGB;  // over the RAM budget: no copy, whatever the speeds
  EXPECT_EQ(ChooseTier(in).tier, CacheTier::kNone);
  in = Measured(1e9, 10e9, 5e9);
  in.shm_free = 1;  // no room in /dev/shm: RAM
  const TierChoice c = ChooseTier(in);
  EXPECT_EQ(c.tier, CacheTier::kRam);
  EXPECT_NE(c.reason.find("only 1 B free"), std::string::npos) << c.reason;
}

TEST(TierChoiceTest, ExplicitTiersAreNotSecondGuessedByAMeasurement) {
  TierInputs in = Measured(10e9, 1e9, 1e9);
  in.requested = CacheTier::kShm;
  EXPECT_EQ(ChooseTier(in).tier, CacheTier::kShm);
}

// OpenCached under "auto" measures and records what it measured; the figures' values
// depend on the machine, so only their presence and the decision's consistency are checked.
TEST(TierChoiceTest, OpenCachedAutoRecordsItsMeasurementInCacheInfo) {
  const std::string dir = std::filesystem::temp_directory_path() / "gpufeed-tier-probe-XXXXXX";
  std::vector<char> name(dir.begin(), dir.end());
  name.push_back('\0');
  ASSERT_NE(mkdtemp(name.data()), nullptr);
  const std::string shm_dir = name.data();
  auto source = OpenSynthetic(ParseSchema("x:float32[64],label:int64"), 2000, 1);
  CacheInfo info;
  OpenCached(source,
             {.tier = CacheTier::kAuto, .shm_dir = shm_dir, .verbose = false, .background = false},
             &info);
  EXPECT_GT(info.measured.source_bytes_per_s, 0);
  EXPECT_GT(info.measured.ram_bytes_per_s, 0);
  EXPECT_NE(info.reason.find("measured: source "), std::string::npos) << info.reason;
  const double enough = kCopyMustBeFaster * info.measured.source_bytes_per_s;
  if (info.tier == CacheTier::kNone) {
    EXPECT_LE(info.measured.ram_bytes_per_s, enough);
  } else {
    EXPECT_GT(info.tier == CacheTier::kShm ? info.measured.shm_bytes_per_s
                                           : info.measured.ram_bytes_per_s,
              enough);
  }
  // Without the measurement: the budgets alone, nothing measured.
  CacheInfo plain;
  OpenCached(source,
             {.tier = CacheTier::kAuto,
              .shm_dir = shm_dir,
              .measure_gather = false,
              .verbose = false,
              .background = false},
             &plain);
  EXPECT_EQ(plain.tier, CacheTier::kShm);
  EXPECT_EQ(plain.measured.source_bytes_per_s, 0);
  std::filesystem::remove_all(shm_dir);
}

}  // namespace
}  // namespace gpufeed
