// A process of device_share_test: opens the device tier of a synthetic data set on the fake
// CUDA driver (GPUFEED_CUDA_LIBRARY, FAKE_CUDA_IPC_DIR set by the test), gathers an epoch
// through a Loader and compares every row with the source, then obeys commands on stdin,
// one per line, answering one line each on stdout:
//   check   -> "CHECK <rows_ok>": another epoch gathered and compared
//   release -> "RELEASED <failures>": the loader and the cache let go
//   quit    -> exits 0 when the fake recorded no failure, else 1
// Its first line: "READY <imported> <host_to_device_copies_of_the_upload> <rows_ok> <device_share
// note>". Usage: device_share_holder SHM_DIR
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "device/cuda_device.h"
#include "fake_cuda/fake_cuda_control.h"
#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace {

using gpufeed::Batch;
using gpufeed::Source;

bool Matches(const Batch& batch, const Source& reference) {
  const std::span<const int64_t> indices = batch.indices();
  const gpufeed::Schema& schema = reference.schema();
  gpufeed::BatchView view;
  view.rows = static_cast<int64_t>(indices.size());
  std::vector<std::vector<std::byte>> expected(schema.fields.size());
  for (size_t f = 0; f < expected.size(); ++f) {
    expected[f].resize(schema.fields[f].SampleBytes() * indices.size());
    view.fields.push_back(expected[f].data());
  }
  auto state = reference.NewWorkerState();
  reference.Read(indices, view, state.get());
  for (size_t f = 0; f < expected.size(); ++f) {
    const gpufeed::FieldView got = batch.field(static_cast<int>(f));
    // The fake's device memory is host memory.
    if (got.bytes() != expected[f].size() ||
        std::memcmp(got.data, expected[f].data(), got.bytes()) != 0) {
      return false;
    }
  }
  return true;
}

bool Epoch(const std::shared_ptr<Source>& cached, const Source& base,
           const std::shared_ptr<gpufeed::Device>& device) {
  gpufeed::LoaderOptions o;
  o.batch_size = 100;
  o.seed = 3;
  o.workers = 2;
  o.device = device;
  gpufeed::Loader loader(cached, o);
  int64_t rows = 0;
  while (auto batch = loader.Next()) {
    batch->Synchronize();
    if (!Matches(*batch, base)) return false;
    rows += batch->size();
  }
  return rows == base.size();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: device_share_holder SHM_DIR\n");
    return 2;
  }
  try {
    std::shared_ptr<gpufeed::Device> device = gpufeed::cuda::OpenCudaDevice();
    auto base = gpufeed::OpenSynthetic(
        gpufeed::ParseSchema("y:float32[8],x:float32[6],b:uint8[3],label:int64"), 1000, 11);
    gpufeed::CacheOptions o;
    o.tier = gpufeed::CacheTier::kDevice;
    o.device = device;
    o.shm_dir = argv[1];
    o.verbose = false;
    o.threads = 1;
    gpufeed::CacheInfo info;
    std::shared_ptr<Source> cached = gpufeed::OpenCached(base, o, &info);
    const bool imported = info.device_share.rfind("imported", 0) == 0;
    const int64_t upload_copies = fake_cuda_copies_completed();  // before any gather
    const bool ok = Epoch(cached, *base, device);
    std::cout << "READY " << imported << " " << upload_copies << " " << ok << " "
              << info.device_share << std::endl;
    std::string command;
    while (std::getline(std::cin, command)) {
      if (command == "check") {
        std::cout << "CHECK " << (cached != nullptr && Epoch(cached, *base, device)) << std::endl;
      } else if (command == "release") {
        cached.reset();
        std::cout << "RELEASED " << fake_cuda_failures() << std::endl;
      } else if (command == "quit") {
        break;
      }
    }
    cached.reset();
    device.reset();
    const int failures = fake_cuda_failures();
    for (int i = 0; i < failures; ++i) {
      std::fprintf(stderr, "fake failure: %s\n", fake_cuda_failure(i));
    }
    fake_cuda_reset();  // joins the destroyed streams' threads (ThreadSanitizer: no leak)
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_share_holder: %s\n", e.what());
    return 3;
  }
}
