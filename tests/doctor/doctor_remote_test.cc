// The doctor's remote stage: reads of an object store named as such, with the advice the
// store's answers call for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpufeed/doctor.h"

namespace gpufeed {
namespace {

using ::testing::HasSubstr;

// 32 batches whose loop waited 30 ms of 40 on reads of 76 ms, from a store.
DoctorInput RemoteReads(int64_t requests, int64_t throttled, int in_flight) {
  DoctorInput in;
  BatchTiming t;
  t.rows = 256;
  t.consumer_wait_ns = 30'000'000;
  t.step_ns = 10'000'000;
  t.read_ns = 76'000'000;
  in.batches.assign(32, t);
  in.workers = 2;
  in.prefetch = 4;
  in.max_workers = 2;
  in.batch_size = 256;
  in.sample_bytes = 8200;
  in.dataset_samples = 100000;
  in.cpu_count = 2;
  in.process_cpu_cores = 0.2;
  in.min_seconds = 0;
  in.delivered_bytes = 67'000'000;
  in.storage_read_bytes = 0;  // the network is no storage device: this is not memory-bound
  in.remote.requests = requests;
  in.remote.throttled = throttled;
  in.remote.retries = throttled;
  in.remote.bytes = 67'000'000;
  in.remote.latency_mean_s = 0.021;
  in.remote.latency_p99_s = 0.180;
  in.remote.max_in_flight = in_flight;
  in.remote.max_requests = 32;
  return in;
}

TEST(DoctorRemote, ThrottlingStoreAdvisesFewerRequestsOrANodeCache) {
  const Diagnosis d = Diagnose(RemoteReads(4000, 212, 32));
  EXPECT_EQ(d.verdict, Verdict::kInputBound);
  EXPECT_EQ(StageName(d.stage), "remote fetch");
  EXPECT_THAT(d.headline, HasSubstr("remote fetch"));
  EXPECT_THAT(d.headline, HasSubstr("4000 requests"));
  EXPECT_THAT(d.headline, HasSubstr("p99 180 ms"));
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0], HasSubstr("the store throttles (212 x 503/429 in 4000 requests)"));
  EXPECT_THAT(d.advice[0], HasSubstr("lower max_requests (now 32)"));
  EXPECT_THAT(d.advice.back(), HasSubstr("cache=\"disk\""));
}

TEST(DoctorRemote, AFullRequestCapAdvisesMoreRequests) {
  const Diagnosis d = Diagnose(RemoteReads(4000, 0, 32));
  EXPECT_EQ(StageName(d.stage), "remote fetch");
  ASSERT_FALSE(d.advice.empty());
  EXPECT_THAT(d.advice[0], HasSubstr("raise max_requests to 64"));
}

TEST(DoctorRemote, LatencyBoundReadsAdviseMoreWorkersAndTheNodeCache) {
  const Diagnosis d = Diagnose(RemoteReads(4000, 0, 6));
  ASSERT_GE(d.advice.size(), 2u);
  EXPECT_THAT(d.advice[0], HasSubstr("latency (p99 180 ms)"));
  EXPECT_THAT(d.advice[1], HasSubstr("cache=\"disk\""));
}

TEST(DoctorRemote, LocalReadsKeepTheReadStage) {
  DoctorInput in = RemoteReads(0, 0, 0);
  in.storage_read_bytes = in.delivered_bytes;
  EXPECT_EQ(StageName(Diagnose(in).stage), "read");
}

}  // namespace
}  // namespace gpufeed
